"""A local Kubernetes control plane of real binaries (etcd, kube-apiserver, ...) for tests,
the demo and benchmarks. Imports nothing else of kdra."""
