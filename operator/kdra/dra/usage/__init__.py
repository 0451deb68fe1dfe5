"""Who holds which device, and how much of each class, node and pool is free: views of the
claims and slices shared by the operator's utilisation gauges and ``kubectl kdra free/top``.

::

    claims.py       one row per claim: state, node, devices, pods
    utilisation.py  devices per class, node and pool by state; holders per namespace and pod

Invariant: pure, as the rest of :mod:`kdra.dra`.
"""
