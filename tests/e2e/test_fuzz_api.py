"""Bad input through the real API server while the operator (with its admission webhooks)
runs: random claims annotations on pods, random ResourceClaims and templates (hypothesis).

Every rejection — by the CRD schemas or by kdra's validating webhook — must name the field at
fault; whatever is accepted must not hurt the operator: afterwards it is still alive, has
logged no traceback, and still binds a well-formed pod.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.operator.core.webhook_configs import MUTATING_CONFIG, VALIDATING_CONFIG
from kdra_devenv.controlplane import ControlPlane, free_port
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, AgentFactory
from tests.e2e.conftest import get_json
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_binder import apply, gpu_class, gpu_pod, template
from tests.unit.dra.test_fuzz import api_like, claim_dicts, scalars

agents = agent_helpers.agents
GROUP, VERSION = "resource.kdra.dev", "v1alpha3"
EXAMPLES = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
# A field in kubectl-explain notation: spec.devices.requests[0].count, metadata.annotations[..]
FIELD = re.compile(r"\b(spec|metadata|status)(\.[A-Za-z]\w*|\[[^\]]*\])*:")


@pytest.fixture
def webhook_operator(control_plane: ControlPlane, conversion_server: ConversionServer,
                     tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[KdraProcess]:
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    port = free_port()
    proc = KdraProcess(["operator", "--health-port", "0", "--prepare-timeout", "30",
                        "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
                        "--webhook-url", f"https://127.0.0.1:{port}",
                        "--webhook-manage-config", "true"],
                       tmp_path / "operator.log", control_plane.kubeconfig,
                       ready_line="kdra operator started")
    proc.start(timeout=120)
    try:
        yield proc
    finally:
        conversion_server.point(control_plane)  # the operator pointed the CRDs at itself
        proc.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"===== operator log =====\n{proc.tail(150)}")
        for kind, name in (("mutatingwebhookconfiguration", MUTATING_CONFIG),
                           ("validatingwebhookconfiguration", VALIDATING_CONFIG)):
            control_plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)


# --------------------------------------------------------------------------- inputs

ENTRY_KEYS = ["name", "resourceClaimName", "resourceClaimTemplateName", "containers",
              "request", "unknown"]
entry_values = st.one_of(st.sampled_from(["gpu", "missing-template", "Bad_Name", "", "a" * 70,
                                          "main", "x.y"]),
                         st.lists(st.sampled_from(["main", "nope", ""]), max_size=2), scalars)
entries = st.dictionaries(st.sampled_from(ENTRY_KEYS), entry_values, max_size=4)
annotation_values = st.one_of(
    st.lists(entries, max_size=3).map(json.dumps),
    st.lists(entries, max_size=3).map(yaml.safe_dump),
    st.lists(st.one_of(entries, scalars), max_size=3).map(json.dumps),
    api_like.map(json.dumps),
    st.text(max_size=40),
    st.sampled_from(["[", "{a: [", "- name: x\n  - y", "null", "[]", "- 1"]))


def _rejection(exc: Any) -> tuple[str, list[str]]:
    """The Status message and the fields its causes name."""
    try:
        status = json.loads(exc.body)
    except (TypeError, ValueError):
        return str(exc.body or exc), []
    causes = (status.get("details") or {}).get("causes") or []
    fields = [str(c["field"]) for c in causes if c.get("field") not in (None, "", "<nil>")]
    return str(status.get("message", exc.body)), fields


class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.messages: dict[str, list[str]] = {}

    def create(self, call: Any, *args: Any, body: dict[str, Any], kind: str) -> None:
        import kubernetes

        try:
            call(*args, body=body)
        except kubernetes.client.exceptions.ApiException as exc:
            message, fields = _rejection(exc)
            self.counts[f"{kind} rejected"] += 1
            self.messages.setdefault(kind, []).append(message)
            assert exc.status in (400, 422), message  # refused as bad input, not a 5xx
            assert fields or FIELD.search(message), f"the rejection names no field: {message}"
        else:
            self.counts[f"{kind} accepted"] += 1


def test_random_bad_input_through_the_api_server(control_plane: ControlPlane, api: Any,
                                                 agents: AgentFactory,
                                                 webhook_operator: KdraProcess,
                                                 namespace: str) -> None:
    import kubernetes

    node = f"fz-{namespace[-6:]}"
    agents(node, "gpus: ['2 x H100-80GB']\n")
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    tally = Tally()

    @EXAMPLES
    @given(annotation_values)
    def pods(annotation: str) -> None:
        pod = gpu_pod(f"fz-{uuid.uuid4().hex[:8]}", namespace, [])
        pod["metadata"]["annotations"][CLAIMS_ANNOTATION] = annotation
        tally.create(core.create_namespaced_pod, namespace, body=pod, kind="pod")

    @EXAMPLES
    @given(st.one_of(claim_dicts(0), api_like.map(lambda s: {"spec": s})))
    def claims(claim: dict[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
                "metadata": {"name": f"fz-{uuid.uuid4().hex[:8]}"},
                "spec": claim.get("spec")}
        tally.create(custom.create_namespaced_custom_object, GROUP, VERSION, namespace,
                     "resourceclaims", body=body, kind="claim")
        template_body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate",
                         "metadata": {"name": f"fz-{uuid.uuid4().hex[:8]}"},
                         "spec": {"spec": claim.get("spec")}}
        tally.create(custom.create_namespaced_custom_object, GROUP, VERSION, namespace,
                     "resourceclaimtemplates", body=template_body, kind="template")

    pods()
    claims()
    # The operator saw all of it (and its claim controller / binder worked through what was
    # accepted): it is still alive and still serves a well-formed pod.
    apply(control_plane, gpu_class(),
          template("good-gpu", namespace, [{"name": "gpu", "deviceClassName": "gpu.kdra.dev"}]))
    good = gpu_pod("good", namespace, [{"name": "gpu", "resourceClaimTemplateName": "good-gpu"}])
    good["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    apply(control_plane, good)
    wait_for(lambda: get_json(control_plane, "pod", "good", "-n", namespace)["spec"]
             .get("nodeName"), timeout=90, what="the good pod bound")
    tracebacks = webhook_operator.tail(100000).count("Traceback")
    print("fuzz-api:", json.dumps({"inputs": sum(tally.counts.values()), **tally.counts,
                                   "operator_alive": webhook_operator.alive,
                                   "tracebacks": tracebacks}))
    for kind, messages in sorted(tally.messages.items()):
        print(f"sample {kind} rejections:\n  " + "\n  ".join(sorted(set(messages))[:3]))
    assert webhook_operator.alive
    assert tracebacks == 0, webhook_operator.tail(80)
