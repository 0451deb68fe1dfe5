"""Issue 22, the input side: kdra attacked as a namespace user would attack it, against the
local control plane with the manifests' RBAC, VAPs and webhooks, the operator and an agent
running as their ServiceAccounts (tests/e2e/hostile_helpers.py).

After each attack: the expected denial or clear error; the operator and the agent still
serve other pods (a fresh pod binds); a restart of the operator succeeds; ``kdra check`` is
clean (:meth:`Hostile.after_attack`). Where the attack is a stored object that the webhooks
now refuse, the object is also stored with the webhook away (an outage, or an object from
before the rule) to show kdra survives it. The denials' texts are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from tests.e2e.conftest import get_json
from tests.e2e.hostile_helpers import (
    API,
    CLAIMS,
    GPU_CLASS,
    SYSTEM,
    Hostile,
    hostile,
    logs_on_failure,
    peak_rss_kib,
    pod_body,
    unique,
)
from tests.e2e.procs import wait_for

__all__ = ["hostile", "logs_on_failure"]  # the module fixture, the logs of a failure

TEMPLATE = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
PROTECT = "protect-pods.resource.kdra.dev"
VALIDATE_PODS = "validate-pods.resource.kdra.dev"
DEVICES_MAIN = "devices.resource.kdra.dev/main"
GPUS_MAIN = "gpus.resource.kdra.dev/main"


def delete_pods(hostile: Hostile, *names: str) -> None:
    hostile.delete_pods(*names)


def recorded_claim(obj: dict[str, Any]) -> str:
    return str(json.loads(obj["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])["gpu"])


def claim_of(hostile: Hostile, name: str) -> dict[str, Any]:
    return dict(get_json(hostile.plane, CLAIMS, name, "-n", hostile.namespace))


def victim(hostile: Hostile) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod (of the same namespace user) bound with a GPU of its own generated claim."""
    name = unique("victim")
    assert hostile.create_as_user(pod_body(name, hostile.namespace, TEMPLATE)).returncode == 0
    obj = hostile.bound_pod(name)
    return obj, claim_of(hostile, recorded_claim(obj))


def operator_log_since(hostile: Hostile, offset: int) -> str:
    assert hostile.operator is not None
    return hostile.operator.log.read_bytes()[offset:].decode(errors="replace")


# --------------------------------------------------------------------------- attack 1


def test_attack1_a_bad_claims_annotation_added_by_update(hostile: Hostile) -> None:
    """Issue: a pod created without the annotation, then annotated with ``[`` nested 1,000
    deep (or a mapping with an int and a str key), stopped every later operator start."""
    bad = {"deep": "[" * 1000, "mixed-keys": "- {name: a, resourceClaimName: b, 1: x}"}
    names = []
    for kind, value in bad.items():
        name = unique(f"late-{kind}")
        names.append(name)
        # Bound by kdra-scheduler (no claims yet): its claims count as resolved from now on.
        created = hostile.create_as_user(pod_body(name, hostile.namespace,
                                                  scheduler="kdra-scheduler"))
        assert created.returncode == 0, created.stderr
        hostile.bound_pod(name)
        hostile.denied(hostile.as_user("annotate", "pod", name, f"{CLAIMS_ANNOTATION}={value}"),
                       f"metadata.annotations[{CLAIMS_ANNOTATION}]",
                       "cannot be changed once the pod's claims are resolved")
    unbound = unique("late-unbound")
    assert hostile.create_as_user(pod_body(unbound, hostile.namespace)).returncode == 0
    hostile.denied(hostile.as_user("annotate", "pod", unbound,
                                   f"{CLAIMS_ANNOTATION}={bad['deep']}"),
                   "nested deeper than 5 levels")
    hostile.denied(hostile.as_user("annotate", "pod", unbound,
                                   f"{CLAIMS_ANNOTATION}={bad['mixed-keys']}"),
                   "keys must be strings")

    # The same annotations stored anyway (the webhook away): the running operator reports
    # them, a restart succeeds (it failed in Store.prime), kdra check reports, not crashes.
    with hostile.without_webhook(VALIDATE_PODS):
        for name, value in zip(names, bad.values(), strict=True):
            result = hostile.as_user("annotate", "pod", name, f"{CLAIMS_ANNOTATION}={value}")
            assert result.returncode == 0, result.stderr
    wait_for(lambda: "InvalidResourceClaims" in hostile.plane.kubectl(
        "get", "events", "-n", hostile.namespace, "--field-selector",
        f"involvedObject.name={names[0]}").stdout, what="an InvalidResourceClaims event")
    assert hostile.operator is not None
    hostile.operator.stop()
    hostile.operator.start(timeout=120)
    checked = hostile.check()
    print(f"\n[kdra check] rc {checked.returncode}: {checked.stdout.strip()}")
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.count("has a malformed claims annotation") == 2
    delete_pods(hostile, *names, unbound)
    hostile.after_attack("attack 1")


# --------------------------------------------------------------------------- attack 2


def alias_bomb(size: int) -> str:
    """The issue's bomb: one long container name anchored once and aliased thousands of
    times in ``containers``, ``size`` bytes in all (each alias is an error to report: the
    old webhook built one message per alias, each repeating the 2,000-character name)."""
    head = ('- name: gpu\n  resourceClaimTemplateName: gpu\n  containers: [&c "'
            + "c" * 2000 + '"')
    aliases = (size - len(head) - 1) // 4
    text = head + ", *c" * aliases + "]"
    return text + " " * (size - len(text))


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def current_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_attack2_alias_bomb_and_huge_annotation_leave_memory_flat(hostile: Hostile) -> None:
    """Issue: a 104 KiB annotation with anchors/aliases in ``containers`` made the webhook
    build 191 MiB of error text (the operator went to 1.7 GiB). Now: refused at once, and
    the operator's peak RSS stays within +50 MiB of its RSS before the attacks."""
    assert hostile.operator is not None and hostile.operator.popen is not None
    pid = hostile.operator.popen.pid
    reset_peak(pid)
    before = current_rss_kib(pid)
    cases = [
        (alias_bomb(104 * 1024), "at most 16384 bytes"),  # the bomb: too big
        (alias_bomb(8 * 1024), "YAML anchors (&name) are not allowed"),  # one that fits
        ("x" * (256 * 1024 - len(CLAIMS_ANNOTATION) - 64), "at most 16384 bytes"),
    ]
    for round_ in range(3):
        for value, words in cases:
            name = unique("bomb")
            result = hostile.create_as_user(pod_body(name, hostile.namespace, value))
            message = hostile.denied(result, "is invalid", words)
            if round_ == 0:
                print(f"  ({len(value.encode())} bytes of annotation, {len(message)} "
                      "characters of error)")
    peak = peak_rss_kib(pid)
    print(f"\n[memory] operator RSS before {before / 1024:.1f} MiB, peak during 9 hostile "
          f"pods {peak / 1024:.1f} MiB: +{(peak - before) / 1024:.1f} MiB")
    assert peak - before <= 50 * 1024
    hostile.after_attack("attack 2")


# --------------------------------------------------------------------------- attack 4


def nested(depth: int) -> str:
    """A JSON object nested ``depth`` levels (as text: Python's encoder stops near 1,000)."""
    return '{"x":' * depth + "{}" + "}" * depth


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_attack4_an_undecodable_claim_does_not_wedge_the_watchers(hostile: Hostile) -> None:
    """Issue: ``status.devices[0].data`` nested 1,100 deep made the claims watch of the
    operator and of every agent loop forever (orjson's depth limit); new pods never bound,
    a fresh operator could not start, and it stayed stuck after the claim was deleted.
    (Device data that deep is now read without that value — issue 36,
    test_hostile_round2_privilege.py — and refused at admission; a claim nested that deep in
    its spec, stored while the webhook was away, still cannot be decoded at all.)"""
    name = unique("deep")
    claim = json.dumps({
        "apiVersion": API, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": hostile.namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": GPU_CLASS}}], "config": [{"requests": ["gpu"], "opaque": {
                "driver": GPU_CLASS, "parameters": "DATA"}}]}}}).replace('"DATA"', nested(1100))
    # A CRD schema cannot bound a free-form field's depth, so the API server stores it; the
    # validating webhook refuses it (it cannot decode it): stored while it is away.
    with hostile.without_webhook("validate.resource.kdra.dev"):
        hostile.plane.kubectl("create", "-f", "-", input=claim)
    assert hostile.operator is not None and hostile.agent is not None
    # Both watchers skip it, count it, and keep serving: a fresh pod binds (the agent
    # prepares it), the operator restarts (its start-up LIST holds the claim).
    hostile.fresh_pod_binds("an undecodable claim")
    for proc in (hostile.operator, hostile.agent):
        wait_for(lambda p=proc: metric(p.metrics(),  # type: ignore[misc]
                                       'kdra_watch_decode_errors_total{kind="ResourceClaim"}'),
                 what=f"{proc.args[0]} counting the skipped claim")
        assert "it cannot be decoded" in proc.log.read_text(errors="replace")
    hostile.operator.stop()
    hostile.operator.start(timeout=120)
    hostile.fresh_pod_binds("an undecodable claim, after a restart")
    checked = hostile.check()
    print(f"\n[kdra check] rc {checked.returncode}: {checked.stderr.strip()[-300:]}")
    assert checked.returncode == 2
    assert f"cannot decode ResourceClaim {hostile.namespace}/{name}" in checked.stderr
    hostile.plane.kubectl("delete", CLAIMS, name, "-n", hostile.namespace)
    hostile.after_attack("attack 4")


# --------------------------------------------------------------------------- attack 6


def test_attack6_forged_claim_statuses(hostile: Hostile) -> None:
    """Issue: a pod created with ``claim-statuses: {"gpu": <another pod's generated
    claim>}`` was bound to the victim's GPU; ``../`` in the value made the operator GET
    arbitrary API paths (a 403 target retried forever with tracebacks); a pod with
    ``spec.nodeName`` preset was added to another claim's reservedFor."""
    victim_pod, victim_claim = victim(hostile)
    stolen = victim_claim["metadata"]["name"]
    secret = "../../../../api/v1/namespaces/kdra-system/secrets/kdra-webhook-tls"
    forged = {
        "thief": pod_body(unique("thief"), hostile.namespace, TEMPLATE,
                          annotations={CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": stolen})}),
        "path": pod_body(unique("path"), hostile.namespace, TEMPLATE,
                         annotations={CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": secret})}),
        "preset": pod_body(unique("preset"), hostile.namespace, TEMPLATE, node=hostile.node,
                           annotations={CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": stolen})}),
    }
    for obj in forged.values():
        hostile.denied(hostile.create_as_user(obj),
                       f"metadata.annotations[{CLAIM_STATUSES_ANNOTATION}]",
                       "is written by kdra only")
    offset = hostile.operator.log.stat().st_size if hostile.operator else 0
    with hostile.without_webhook(PROTECT, VALIDATE_PODS):
        for obj in forged.values():
            result = hostile.create_as_user(obj)
            assert result.returncode == 0, result.stderr
    thief = hostile.bound_pod(forged["thief"]["metadata"]["name"])
    path = hostile.bound_pod(forged["path"]["metadata"]["name"])
    for obj in (thief, path):  # each got a claim of its own, recorded by kdra
        own = claim_of(hostile, recorded_claim(obj))
        assert own["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    preset = forged["preset"]["metadata"]["name"]
    wait_for(lambda: recorded_claim(hostile.pod(preset)) != stolen,
             what="the preset pod's forged record replaced")
    time.sleep(2)  # give a wrong reservation time to happen
    after = claim_of(hostile, stolen)
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [victim_pod["metadata"]["uid"]]
    assert after["status"]["allocation"] == victim_claim["status"]["allocation"]
    log = operator_log_since(hostile, offset)
    assert "Traceback" not in log and "403" not in log, log[-2000:]
    delete_pods(hostile, victim_pod["metadata"]["name"], thief["metadata"]["name"],
                path["metadata"]["name"], preset)
    hostile.after_attack("attack 6")


# --------------------------------------------------------------------------- attack 7


def test_attack7_user_env_and_forged_device_annotations(hostile: Hostile) -> None:
    """Issue: the webhook kept a user's ``NVIDIA_VISIBLE_DEVICES=all``; forged device / GPU
    annotations survived binding and could be patched after it; kdra-scheduler bound a pod
    with no claims but forged device annotations; kdra check was silent about it."""
    ns = hostile.namespace
    for env in ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "KDRA_DEVICES", "value": f"gpu.kdra.dev/{hostile.node}/gpu-0"}):
        hostile.denied(hostile.create_as_user(pod_body(unique("env"), ns, TEMPLATE, env=[env])),
                       "spec.containers[0].env[0]",
                       f"{env['name']} is set by kdra")
    forged = {DEVICES_MAIN: f"gpu.kdra.dev/{hostile.node}/gpu-0"}
    no_claims = pod_body(unique("forged"), ns, annotations=forged, scheduler="kdra-scheduler")
    hostile.denied(hostile.create_as_user(no_claims), DEVICES_MAIN,
                   "is written by kdra only")
    victim_pod, _ = victim(hostile)
    name = victim_pod["metadata"]["name"]
    for args in (["gpus.resource.kdra.dev/sidecar=GPU-someone-else"],
                 ["--overwrite", f"{GPUS_MAIN}=GPU-someone-else"],
                 ["--overwrite", f"{DEVICES_MAIN}=gpu.kdra.dev/{hostile.node}/gpu-3"],
                 [f"{DEVICES_MAIN}-"]):
        hostile.denied(hostile.as_user("annotate", "pod", name, *args),
                       "it cannot be added, changed or removed")

    with hostile.without_webhook(PROTECT, VALIDATE_PODS):
        created = hostile.create_as_user(no_claims)
        assert created.returncode == 0, created.stderr
    forged_name = no_claims["metadata"]["name"]

    def refused() -> dict[str, Any] | None:
        conditions = hostile.pod(forged_name).get("status", {}).get("conditions") or []
        return next((c for c in conditions if c.get("reason") == "InvalidPod"), None)

    condition = wait_for(refused, what="PodScheduled=False, InvalidPod")
    print(f"\n[kdra-scheduler] {condition['message']}")
    assert not hostile.pod(forged_name)["spec"].get("nodeName")
    checked = hostile.check()
    print(f"[kdra check] rc {checked.returncode}: {checked.stdout.strip()}")
    assert checked.returncode == 1 and "forged-devices" in checked.stdout
    delete_pods(hostile, forged_name, name)
    hostile.after_attack("attack 7")


# --------------------------------------------------------------------------- held before


def test_held_cross_namespace_claims_dotted_names_and_oversized_cel(hostile: Hostile) -> None:
    """What already held (keep it): a pod names a claim of another namespace; a claim
    name with ``../``; a CEL selector over the 10 KiB limit."""
    other = hostile.probes  # another namespace of the same user, with its own claim
    shared = unique("theirs")
    body = {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": shared, "namespace": other},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": GPU_CLASS}}]}}}
    assert hostile.create_as_user(body, namespace=other).returncode == 0
    hostile.denied(hostile.create_as_user(pod_body(unique("cross"), hostile.namespace, [
        {"name": "gpu", "resourceClaimName": f"{other}/{shared}"}])), "DNS subdomain")
    hostile.denied(hostile.create_as_user(pod_body(unique("dots"), hostile.namespace, [
        {"name": "gpu", "resourceClaimName": "../../secrets/x"}])), "DNS subdomain")
    # The same name without its namespace is looked up in the pod's own: never found there.
    waiting = unique("cross")
    assert hostile.create_as_user(pod_body(waiting, hostile.namespace, [
        {"name": "gpu", "resourceClaimName": shared}])).returncode == 0
    time.sleep(3)
    assert not hostile.pod(waiting)["spec"].get("nodeName")
    theirs = dict(get_json(hostile.plane, CLAIMS, shared, "-n", other))
    assert not (theirs.get("status") or {}).get("reservedFor")
    selector = "device.driver == 'gpu.kdra.dev' && " + " && ".join(
        ["device.driver != 'x'"] * 700)
    oversized = {"apiVersion": API, "kind": "ResourceClaim",
                 "metadata": {"name": unique("cel"), "namespace": hostile.namespace},
                 "spec": {"devices": {"requests": [{
                     "name": "gpu", "exactly": {
                         "deviceClassName": GPU_CLASS,
                         "selectors": [{"cel": {"expression": selector}}]}}]}}}
    assert len(selector) > 10 * 1024
    hostile.denied(hostile.create_as_user(oversized), "10240")
    delete_pods(hostile, waiting)
    hostile.plane.kubectl("delete", CLAIMS, shared, "-n", other)
    hostile.after_attack("held attacks")


# --------------------------------------------------------------------------- NRI tolerance


def test_a_tenant_cannot_opt_out_of_kdras_nri_plugin(hostile: Hostile) -> None:
    """With containerd's NRI validator requiring kdra, ``tolerate-missing-plugins.kdra.dev``
    lets a container start without kdra's plugin — without its device isolation, so an image's
    ``NVIDIA_VISIBLE_DEVICES=all`` would stand while the agent is away. A tenant's pod may not
    carry it (NRI's per-container and per-pod forms neither), not at creation and not by a later
    annotate; kdra's own pods, in kdra's namespace, still may."""
    ns = hostile.namespace
    for key in ("tolerate-missing-plugins.kdra.dev",
                "tolerate-missing-plugins.kdra.dev/container.main",
                "tolerate-missing-plugins.kdra.dev/pod"):
        message = hostile.denied(
            hostile.create_as_user(pod_body(unique("optout"), ns, annotations={key: "true"})),
            f"metadata.annotations[{key}]", "without kdra's NRI plugin")
        print(message)
    plain = unique("plain")
    assert hostile.create_as_user(pod_body(plain, ns)).returncode == 0
    hostile.denied(hostile.as_user("annotate", "pod", plain,
                                   "tolerate-missing-plugins.kdra.dev=true"),
                   "without kdra's NRI plugin")
    own = unique("kdra-own")
    created = hostile.plane.kubectl("create", "-f", "-", input=json.dumps(pod_body(
        own, SYSTEM, annotations={"tolerate-missing-plugins.kdra.dev": "true"})), check=False)
    assert created.returncode == 0, created.stderr
    delete_pods(hostile, plain)
    hostile.delete_pods(own, namespace=SYSTEM)
