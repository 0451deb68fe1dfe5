"""tests.unit.cli."""
