"""kdra.cli."""
