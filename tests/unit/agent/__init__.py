"""tests.unit.agent."""
