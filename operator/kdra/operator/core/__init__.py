"""The operator's pure core: admission (device variables too), conversion answers, bindings,
extended resources, quotas, preemption, taint eviction, pod device annotations, the claim
controller's births (map: :mod:`kdra.operator`).

Invariant: no I/O, no clock, no API client; imports only ``kdra.dra``, ``kdra.kube.core`` and
itself (import-linter).
"""
