"""tests.unit.devenv."""
