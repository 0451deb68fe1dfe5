"""The end-to-end session's conversion webhook: a real ``kdra webhooks`` process that converts
kdra's objects between ``v1`` (storage) and ``v1alpha3`` for the whole test session.

Why: the CRDs store v1 and convert through a webhook, and many tests write v1alpha3 (which the
session serves, as manifests/components/v1alpha3 does on request) while no operator runs — an
operator is a per-test process, and the
webhook configurations it would manage would outlive it. So the session starts one webhook
server before the first test, with a certificate the fixture issues, and points the CRDs'
``spec.conversion`` at it; tests that run their own webhook-serving operator, or apply the
CRDs themselves, point them back (:meth:`ConversionServer.point`,
:meth:`ConversionServer.install_crds`), and a test that needs the webhook down stops and
restarts this one.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kdra.operator.core.webhook_configs import CRD_NAMES, Endpoint, conversion
from kdra_devenv.controlplane import ControlPlane, free_port
from kdra_devenv.pki import CertificateAuthority
from tests.e2e.procs import KdraProcess

CRDS = Path(__file__).resolve().parents[2] / "crds"


class ConversionServer:
    """``kdra webhooks`` on loopback with a supplied certificate (no API writes of its own)."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.directory = workdir / "conversion-webhook"
        ca = CertificateAuthority(self.directory, "kdra-e2e-webhook-ca")
        ca.issue("tls", "127.0.0.1", server_names=("127.0.0.1",))
        self.ca_pem = ca.pem
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.proc = KdraProcess(
            ["webhooks", "--webhook-port", str(self.port), "--webhook-host", "127.0.0.1",
             "--webhook-url", self.url, "--webhook-cert-dir", str(self.directory),
             "--webhook-manage-config", "false"],
            self.directory / "webhooks.log", kubeconfig, ready_line="kdra webhooks serving")

    def start(self) -> ConversionServer:
        self.proc.start()
        return self

    def stop(self) -> None:
        self.proc.stop()

    def point(self, plane: ControlPlane) -> None:
        """Point the CRDs' conversion at this server (re-applying ``crds/``)."""
        self.install_crds(plane, CRDS)

    def install_crds(self, plane: ControlPlane, source: Path) -> None:
        """Apply the CRDs of ``source`` (a kustomization) server-side with their conversion
        pointing at this server. Every e2e application of kdra's CRDs goes through here: the
        manifests name the in-cluster Service, and an apply that adds it beside the URL a
        patch put there would leave the CRD invalid (a client config has one or the other)."""
        out = plane.kubectl("kustomize", str(source)).stdout
        docs = [doc for doc in yaml.safe_load_all(out) if doc]
        for doc in docs:
            if doc.get("kind") == "CustomResourceDefinition" and \
                    doc["metadata"]["name"] in CRD_NAMES:
                doc["spec"]["conversion"] = conversion(Endpoint(url=self.url), self.ca_pem)
                for version in doc["spec"]["versions"]:  # the session serves v1alpha3 too
                    version["served"] = True  # (manifests/components/v1alpha3)
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                      input=yaml.safe_dump_all(docs))
