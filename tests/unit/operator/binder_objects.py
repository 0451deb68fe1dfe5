"""Objects the binder's unit tests feed it: one shape of a kdra ResourceClaim for all of them."""

from __future__ import annotations

from typing import Any

from kdra.kube.core.podclaims import FINALIZER

DRIVER = "gpu.kdra.dev"


def gpu_claim(name: str, rv: str, *, namespace: str, device: str | None = None,
              owners: tuple[str, ...] = ()) -> dict[str, Any]:
    """Claim ``name`` in ``namespace`` asking for one device of class ``gpu.kdra.dev``;
    allocated to ``device`` of pool worker-1 and reserved for the pods ``owners`` (uid
    ``uid-<name>``) when ``device`` is given, else pending."""
    status: dict[str, Any] = {}
    if device is not None:
        status = {"allocation": {"devices": {"results": [
                      {"request": "gpu", "driver": DRIVER, "pool": "worker-1",
                       "device": device}]}},
                  "reservedFor": [{"resource": "pods", "name": o, "uid": f"uid-{o}"}
                                  for o in owners]}
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "resourceVersion": rv, "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu",
                                               "exactly": {"deviceClassName": DRIVER}}]}},
            "status": status}
