"""kdra — Kubernetes Dynamic Resource Allocation with structured parameters, as an operator.

Layers, imported only downwards (checked by import-linter, see pyproject.toml)::

    kdra.main                 command line: `kdra operator`, `kdra agent`, `python -m kdra_devenv demo`, ...
    kdra.operator.handlers            kopf decorators, thin: unpack, call a service, return
    kdra.services            scheduling loop, binder, claim controller, slice GC, agent loops
    kdra.kube                the only package that talks to the API server
    kdra.domain              pure: API models, CEL, allocator, naming, release rules

``kdra_devenv`` (a local control plane of real binaries for tests and the demo) stands
beside the layers and imports none of them.
"""

__version__ = "0.1.0"

GROUP = "resource.kdra.dev"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
