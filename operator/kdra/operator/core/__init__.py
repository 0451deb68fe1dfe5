"""kdra.operator.core."""
