"""kdra's development environment — dev-only, outside the product (not in the wheel or the
image): what the tests, the benchmarks, ``make demo`` and ``hack/`` run kdra on.

::

    controlplane.py  etcd, kube-apiserver, kube-controller-manager on loopback (real binaries)
    pki.py           the control plane's certificates (built with kdra's own PKI)
    process.py       child processes that die with whoever started them
    demo.py          ``make demo``: a control plane, kdra's operator and agents, the examples
    demo_node.py     ``make demo NODE=real``: the same on a real kubelet node
    containerd.py    a real containerd 2.x, isolated from the host's
    images.py        tiny OCI images built without a registry
    imagebuild.py    kdra's image from the Dockerfile (buildah), for the real node
    node.py          a real kubelet node of this machine (root)
    hostledger.py    every host change the real node makes, recorded first, undone
    realcluster.py   kdra as a user deploys it, on the real node
    nodecmd.py       ``python -m kdra_devenv node up | down``
    __main__.py      ``python -m kdra_devenv demo | controlplane | node``

Importable where ``devenv/`` is on the path: the venv's ``kdra-devenv.pth`` (written by
``make``), pytest's ``pythonpath``. Invariant: kdra never imports it (import-linter); it
imports kdra only for what both must agree on (the PKI).
"""
