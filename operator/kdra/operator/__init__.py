"""The operator (``kdra operator``): the claim lifecycle from admission to bound pod — kdra's
counterpart of kube-controller-manager's resourceclaim controller, kube-scheduler's DRA
plugin and the API server's admission, for ``resource.kdra.dev``.

Its rooms, each importing only those below it (import-linter)::

    handlers/           kopf: start-up, clean-up, liveness, and every entry point of the claim
                        lifecycle in one table (routes.py: the kinds watched, the services
                        each event feeds)
    composition.py      the composition root: one API client, the caches, the controllers
                        (each subscribed to the typed caches it reads)
    webhooks/           admission (validate, mutate pods, bindings), conversion, their
                        HTTPS server's upkeep: certificates, configurations
    claim_controller.py per-pod claims from templates, reservation clean-up, deallocation:
                        the controller (events in, queues, gauges), its pod side
                        (claim_pods.py) and its claim side (claim_release.py)
    scheduler/          the binder: queue, placement, preemption, quota, writes, prepare wait,
                        long searches
    slice_gc.py         slices nobody stands behind any more are deleted
    taint_eviction.py   pods on NoExecute-tainted devices are evicted
    utilisation.py      the utilisation gauges, computed at scrape time
    caches.py           the shared caches: claims and slices typed (parsed once per
                        version, kdra.kube.typed_cache), pods with claims raw
    metrics/            the operator's metrics
    settings.py         OperatorSettings: one frozen object, flags and environment
    core/               the pure core: every decision without I/O (below)

``core/`` — decisions, no I/O, no API client, nothing of the shell::

    admission.py, admission_objects.py   what the webhooks allow, deny or patch
    admission_env.py                     the device variables only kdra may set
    conversion_review.py                 the /convert answer, from bytes to bytes
    bindings.py                          which pods the operator may bind
    webhook_configs.py                   the webhook configurations as plain objects
    extended.py                          extended resources backed by kdra (KEP-5004)
    quota.py, quota_admission.py         DeviceQuota arithmetic; the early check
    preemption.py                        which lower-priority pods go, on which node
    eviction.py                          which pods a NoExecute taint evicts, and when
    pod_devices.py                       the device annotations of a bound pod
    claim_births.py                      the claims the controller created, per pod

Shared with the other programs only through :mod:`kdra.kube` (the API, the kdra flavour's
pod<->claim conventions) and :mod:`kdra.dra` (models, CEL, the allocator, scheduling rules).
"""
