"""The Kubernetes edge every program shares — and the only code that talks to the API server
(import-linter: aiohttp, pykube and requests are imported here only; one client per job:
``client`` on aiohttp for the programs, ``reader`` on pykube-ng for the command-line tools).

::

    core/             pure: the kdra flavour's conventions and untrusted input (below)
    client.py         the async API client (operator, agent): raw JSON, typed errors, watches
    kubeconfig.py     credentials: kubeconfig files and contexts, the in-cluster service
                      account
    credentials.py    using them: TLS, request headers (tokens refreshed, exec plugins)
    codec.py          JSON to and from the API server, undecodable items skipped
    errors.py         ApiError and its subclasses
    resources.py      where each kind lives in the REST API
    events.py         Events for what a user must see
    store.py          in-memory caches of API objects, fed by watch events
    typed_cache.py    a store whose objects parse once per version into the v1 models, and
                      the services subscribed to its events
    informer.py       one watch per kind, every change handed over in order
    workqueue.py      a keyed work queue for level-based controllers
    leader.py         leader election on a Lease
    webhook_server.py the HTTPS server the API server calls the webhooks on
    webhook_intake.py reading a webhook request: the caller's certificate, body caps, time,
                      decoding off the event loop
    reader.py         the command-line tools' one client: synchronous reads as the user
                      (pykube-ng; ``kubectl kdra``, ``kdra describe``, ``kdra check``)
    metrics/          the watch metrics and the serving of /metrics
    flags.py          settings from flags and the environment
    logs.py           the processes' logging: level, klog-like -v, text or JSON lines
    loops.py          the event loop (uvloop)
    memory.py         the C heap: its gauges, malloc_trim

``core/`` (pure, what every program may use)::

    podclaims.py      pods and their claims: annotations, claim-statuses, generated names,
                      the finalizer (the kdra flavour of DRA's pod<->claim edge)
    extended_entry.py the extended-resources field of a claims-annotation entry
    agent_leases.py   the agent's heartbeat Lease names, labels, annotations
    names.py          object names built from node and driver names
    pool_ownership.py which node may speak for a pool (a node only for its own)
    printable.py      cluster strings made safe to show (terminals, events, logs)
    untrusted.py      decoding user-written YAML/JSON with caps
    jsonscan.py       reading JSON that cannot be decoded whole
    backoff.py        capped exponential backoff with jitter

Invariants: imports only ``kdra.dra`` of the rest of kdra; ``core`` imports nothing of the
shell and no I/O library.
"""
