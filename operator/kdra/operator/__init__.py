"""kdra.operator."""
