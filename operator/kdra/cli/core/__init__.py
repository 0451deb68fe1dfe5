"""kdra.cli.core."""
