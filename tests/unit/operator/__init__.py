"""tests.unit.operator."""
