"""kdra's DRA core: the reusable part of Dynamic Resource Allocation, usable on its own.

What upstream keeps in ``k8s.io/dynamic-resource-allocation`` (and the resource API's
types): the API models (``models``: v1 and the 1.31 v1alpha3 shape, conversion between
them), CEL selectors (``cel``: upstream's environment, type checker and cost limits),
``quantity`` and ``semver``, device taints (``taints``, ``taint_rules``), the one error
hierarchy (``errors``), condition timestamps (``timestamps``) and the structured allocator
(``allocator``); and the pure pieces two of kdra's programs share about devices and
scheduling decisions: the binder's node filters, placement policy and explanations
(``scheduling``, also ``kubectl kdra why``'s), when an allocated claim's devices let its pod
bind (``binding_conditions``, also ``kdra check``'s) and who holds which device (``usage``,
the operator's gauges and ``kubectl kdra free``). Pure: no I/O, no API clients, no clock but
the allocator's search deadline and condition timestamps, and nothing from the rest of kdra
(an import-linter contract in pyproject.toml) — the programs' own policies (admission, node
preparation, inventory...) live in their ``core`` packages (:mod:`kdra.operator.core`,
:mod:`kdra.agent.core`, :mod:`kdra.cli.core`) and build on this.

Allocating a claim against a slice, without any cluster::

    >>> from kdra.dra.allocator import NodeInfo, Snapshot, allocate
    >>> from kdra.dra.models.v1 import parse_claim, parse_class
    >>> from kdra.dra.models.v1_slices import parse_slice
    >>> gpus = parse_slice({
    ...     "metadata": {"name": "node-1-gpus"},
    ...     "spec": {"driver": "gpu.example.com", "nodeName": "node-1",
    ...              "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
    ...              "devices": [{"name": f"gpu-{i}", "attributes": {
    ...                  "memory": {"int": 40 if i else 80}}} for i in range(4)]}})
    >>> big = parse_class({"metadata": {"name": "big-gpu"}, "spec": {"selectors": [
    ...     {"cel": {"expression": "device.attributes['gpu.example.com'].memory >= 80"}}]}})
    >>> claim = parse_claim({
    ...     "metadata": {"name": "train", "namespace": "ml"},
    ...     "spec": {"devices": {"requests": [
    ...         {"name": "gpu", "exactly": {"deviceClassName": "big-gpu"}}]}}})
    >>> snapshot = Snapshot.build(slices=[gpus], classes=[big])
    >>> [result] = allocate([claim], snapshot, NodeInfo("node-1"))
    >>> [(d.request, d.device) for d in result.devices.results]
    [('gpu', 'gpu-0')]
    >>> allocate([claim], Snapshot.build(slices=[gpus], classes=[big], claims=[
    ...     claim.model_copy(update={"status": claim.status.model_copy(
    ...         update={"allocation": result})})]), NodeInfo("node-1")) is None
    True

``allocate`` answers for one node: the results per claim, ``None`` when the claims do not
fit (above: the only 80 GiB GPU is taken by the claim's own allocation),
:class:`~kdra.dra.errors.AllocationError` for bad input, or
:class:`~kdra.dra.errors.SearchExhausted` when its search spends its budget (by default a
million steps or ten seconds) without deciding; :func:`kdra.dra.allocator.place` answers for
many nodes.
"""
