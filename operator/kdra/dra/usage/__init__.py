"""kdra.dra.usage."""
