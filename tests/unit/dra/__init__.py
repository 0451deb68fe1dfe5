"""tests.unit.dra."""
