"""kdra.agent.core."""
