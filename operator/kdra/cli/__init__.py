"""The command-line tools: ``kubectl kdra`` (a kubectl plugin, the user's own kubeconfig and
RBAC), ``kdra describe`` and ``kdra check``. They read; they never write.

::

    kubectl.py           ``kubectl-kdra``: the plugin's flags (kubectl's: --context, -n, --as...)
    kubectl_commands.py  ``kubectl kdra free | describe | why | top | check``
    describe.py          ``kdra describe``
    check.py             ``kdra check`` (the cluster's part; :mod:`kdra.checks` adds a node's
                         disk) and ``kubectl kdra check``
    core/                the pure core: the views, below

``core/`` — views of plain API objects, no I/O::

    describe.py, describe_gpus.py     free and taken devices per pool; partitions and shares
    why.py                            why a pod waits: node groups, the nearest fit
    invariants.py, invariants_shared.py, forged.py   ``kdra check``'s cluster rules
    tables.py                         tables as kubectl prints them

Reads go through :mod:`kdra.kube` (the official client for ``kdra describe/check``,
pykube-ng for ``kubectl kdra``); who holds which device and the utilisation views are the DRA
core's (:mod:`kdra.dra.usage`), shared with the operator's gauges.
"""
