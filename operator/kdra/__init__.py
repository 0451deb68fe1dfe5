"""kdra — Kubernetes Dynamic Resource Allocation with structured parameters, as an operator.

The house: four programs beside the DRA core, each a pure core and an I/O shell::

    kdra.dra        the DRA core, a library on its own: models, CEL, allocator, quantity,
                    semver, taints, scheduling rules, binding conditions, usage views (pure)
    kdra.kube       the Kubernetes edge every program shares, and the only code that talks to
                    the API server: client, informers, stores, events, webhook HTTPS server
                    and its intake, metrics serving; kube.core: the kdra flavour's
                    pod<->claim conventions, pool ownership, printable strings
    kdra.operator   ``kdra operator``: kopf handlers, claim controller, scheduler (the
                    binder), webhooks, slice GC, taint eviction, utilisation
    kdra.agent      ``kdra agent``: discovery, slices, heartbeat, prepare, exposure (NRI), health
    kdra.cli        ``kubectl kdra``, ``kdra describe``, ``kdra check``
    kdra.main       the ``kdra`` command: one subcommand per program, imported when it runs
    kdra.checks     the whole ``kdra check``: the cluster's rules and a node agent's disk

The programs never import each other: they meet in ``kdra.kube`` and ``kdra.dra``. A
program's ``core`` package holds its decisions (pure: no I/O, no API client); the rest of the
program is its I/O shell. import-linter checks all of it (pyproject.toml). The development
environment (control planes, real nodes, the demo) is ``kdra_devenv`` in ``devenv/``, outside
the product: kdra never imports it.
"""

__version__ = "0.1.0"

GROUP = "resource.kdra.dev"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
