"""kdra.operator.webhooks."""
