"""tests.unit.hack."""
