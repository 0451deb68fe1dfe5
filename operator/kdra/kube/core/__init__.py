"""kdra.kube.core."""
