"""kdra.kube.metrics."""
