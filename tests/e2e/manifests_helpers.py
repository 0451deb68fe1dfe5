"""What the manifests tests (test_manifests_build, test_manifests_rbac, test_chart) share:
building a kustomization, the module fixture :func:`installed` and a reduced ServiceMonitor CRD.

:func:`installed` applies the CRDs kdra's manifests need and the base's RBAC objects and
admission policies *for real* (they only affect kdra's service accounts), and deletes them
again at the end of the module (but not the Namespace or ServiceAccounts: other tests use
kdra-system); a test module imports it to use it, and gets its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT
from tests.e2e.conversion import ConversionServer

MANIFESTS = ROOT / "manifests"
REAL_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def build(plane: ControlPlane, directory: str) -> list[dict[str, Any]]:
    out = plane.kubectl("kustomize", str(MANIFESTS / directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane,
              conversion_server: ConversionServer) -> Iterator[list[dict[str, Any]]]:
    """CRDs (kdra's and kopf's) and the base's RBAC + admission policies, for real (the CRDs'
    conversion pointed at the session's webhook server, see tests/e2e/conversion.py)."""
    conversion_server.install_crds(control_plane, MANIFESTS / "base/crds")
    control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "crd",
                          "-l", "app.kubernetes.io/part-of=kdra")
    docs = build(control_plane, "base")
    real = [doc for doc in docs if doc["kind"] in REAL_KINDS]
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                          input=yaml.safe_dump_all(real))
    yield docs
    for doc in reversed(real):
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            continue  # other tests use kdra-system
        args = [doc["kind"].lower(), doc["metadata"]["name"]]
        if doc["metadata"].get("namespace"):
            args += ["-n", doc["metadata"]["namespace"]]
        control_plane.kubectl("delete", *args, "--ignore-not-found", "--wait=false",
                              check=False)


# A prometheus-operator ServiceMonitor CRD reduced to the fields the overlay uses, with the
# same types and patterns as upstream's (v0.84): strict field validation rejects anything else,
# so a typo or a field upstream does not have fails here.
DURATION = ("^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
            "(([0-9]+)ms)?)$")
SERVICEMONITOR_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors,
          singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [endpoints, selector]
            properties:
              jobLabel: {type: string}
              endpoints:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: string}
                    path: {type: string}
                    scheme: {type: string, enum: [http, https]}
                    interval:
                      type: string
                      pattern: DURATION
              namespaceSelector:
                type: object
                properties:
                  any: {type: boolean}
                  matchNames: {type: array, items: {type: string}}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                properties:
                  matchLabels: {type: object, additionalProperties: {type: string}}
                  matchExpressions:
                    type: array
                    items:
                      type: object
                      required: [key, operator]
                      properties:
                        key: {type: string}
                        operator: {type: string}
                        values: {type: array, items: {type: string}}
""".replace("DURATION", f"'{DURATION}'")
