"""Issue 36, the tenants' side (points 3, 5, 6 and part of 7): kdra attacked by namespace
users (``kubectl --as``, the built-in ``edit`` role's rights plus kdra's claims) and by a
compromised node agent, against the local control plane with the manifests' RBAC, VAPs and
webhooks, the operator and an agent running as their ServiceAccounts
(tests/e2e/hostile_helpers.py).

After each attack: denied or harmless; the operator and the agent still serve another
tenant's pod (it binds); a restart of the operator succeeds; ``kdra check`` is clean, or
names the mark the attack left (:meth:`Hostile.after_attack`). The figures behind
docs/reliability.md's "Hostile input, round two" rows are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unicodedata
from typing import Any

import pytest

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from kdra.operator.core.webhook_configs import MUTATING_CONFIG
from kdra.operator.handlers.routes import PAUSE_ENV
from tests.e2e.conftest import ROOT
from tests.e2e.hostile_helpers import (
    API,
    CLAIMS,
    GPU_CLASS,
    PAUSE,
    USER,
    USER_ROLES,
    Hostile,
    hostile,
    logs_on_failure,
    pod_body,
    template_body,
    unique,
)
from tests.e2e.procs import wait_for

__all__ = ["hostile", "logs_on_failure"]  # the module fixture, the logs of a failure

TEMPLATE = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
VALIDATE_PODS = "validate-pods.resource.kdra.dev"


def delete_pods(hostile: Hostile, *names: str, namespace: str | None = None) -> None:
    hostile.delete_pods(*names, namespace=namespace)


def claims_owned_by(hostile: Hostile, uid: str) -> list[dict[str, Any]]:
    items = json.loads(hostile.plane.kubectl("get", CLAIMS, "-n", hostile.namespace,
                                             "-o", "json").stdout)["items"]
    return [c for c in items if any(ref.get("uid") == uid for ref in
                                    c["metadata"].get("ownerReferences") or ())]


def created_total(hostile: Hostile) -> float:
    """kdra_resourceclaim_controller_creates_total, every status, from the operator."""
    assert hostile.operator is not None
    return sum(float(line.rsplit(" ", 1)[1]) for line in hostile.operator.metrics().splitlines()
               if line.startswith("kdra_resourceclaim_controller_creates_total{"))


# --------------------------------------------------------------------------- point 3


def test_hostile_no_claim_storm_for_a_pod_deleted_while_the_operator_was_busy(
        hostile: Hostile) -> None:
    """Issue: a pending pod, the operator restarted and busy (a selector that blocks it, an
    OOM kill), the pod deleted meanwhile — the claim controller then created ~13 claims/s
    for the deleted pod (724 in 80 s) until the next restart. The cause: the caches are
    primed from a LIST at start-up, but the watches' first LIST (seconds later when the
    start-up is slow) was not compared with them, so the deleted pod stayed cached for ever;
    each claim created for it was deleted by the garbage collector (its owner is gone), and
    that deletion made the controller create the next one. Here the busy start-up is the
    operator's test pause between start-up and watches; the pod waits for a template that
    appears during the pause (what makes the controller act on the pod first)."""
    assert hostile.operator is not None
    template = unique("late")
    name = unique("storm")
    created = hostile.create_as_user(pod_body(name, hostile.namespace, [
        {"name": "gpu", "resourceClaimTemplateName": template}]))
    assert created.returncode == 0, created.stderr
    uid = json.loads(created.stdout)["metadata"]["uid"]
    wait_for(lambda: "FailedResourceClaimCreation" in hostile.plane.kubectl(
        "get", "events", "-n", hostile.namespace, "--field-selector",
        f"involvedObject.name={name}").stdout, what="the missing-template event")

    hostile.operator.stop()
    hostile.operator.env = {**hostile.operator.env, PAUSE_ENV: "6"}
    try:
        hostile.operator.start(timeout=120)
        wait_for(lambda: PAUSE_ENV in hostile.operator.log.read_text(errors="replace"),
                 what="the operator pausing before its watches")
        delete_pods(hostile, name)  # while the operator is busy
        made = hostile.create_as_user(template_body(template, hostile.namespace))
        assert made.returncode == 0, made.stderr
        before = created_total(hostile)
        time.sleep(6 + 15)  # the pause, then 15 s of what it does
        claims = claims_owned_by(hostile, uid)  # those the garbage collector has yet to delete
        storm = created_total(hostile) - before
    finally:
        hostile.operator.env = {k: v for k, v in hostile.operator.env.items() if k != PAUSE_ENV}
    print(f"\n[storm] claims created for the deleted pod in 15 s: {storm:.0f} "
          f"({len(claims)} still listed)")
    assert storm == 0 and not claims, f"{storm} claims created for a deleted pod"
    hostile.after_attack("a claim-creation storm")


@pytest.mark.parametrize("watch", ["informers", "kopf"])
def test_hostile_a_pod_deleted_before_the_watches_start_releases_its_devices(
        hostile: Hostile, watch: str) -> None:
    """A bound pod force-deleted between the operator's start-up LIST and its watches (a
    busy start-up: the test pause) is never delivered as deleted by a watch that starts with
    a LIST of its own — kopf's re-lists deliver what is listed, not what is gone (issue 37,
    point 6). Both event paths must still release the pod's claim (its devices): the
    informers from their first LIST, ``--watch=kopf`` from the operator's reconciling LIST a
    few seconds after the start. Without it the deleted pod stays cached for ever, its claim
    reserved and its devices held."""
    assert hostile.operator is not None
    name = unique(f"gone-{watch}")
    made = hostile.create_as_user(pod_body(name, hostile.namespace, TEMPLATE))
    assert made.returncode == 0, made.stderr
    uid = json.loads(made.stdout)["metadata"]["uid"]
    hostile.bound_pod(name)
    wait_for(lambda: any((c.get("status") or {}).get("reservedFor")
                         for c in claims_owned_by(hostile, uid)), what="the claim reserved")
    hostile.operator.stop()
    env = dict(hostile.operator.env)
    hostile.operator.env = {**env, PAUSE_ENV: "6", "KDRA_WATCH": watch}
    try:
        hostile.operator.start(timeout=120)
        wait_for(lambda: PAUSE_ENV in hostile.operator.log.read_text(errors="replace"),
                 what="the operator pausing before its watches")
        delete_pods(hostile, name)  # while the operator is busy
        began = time.monotonic()
        wait_for(lambda: not any((c.get("status") or {}).get("allocation")
                                 for c in claims_owned_by(hostile, uid)),
                 timeout=60, what=f"the deleted pod's claim released ({watch})")
        print(f"\n[{watch}] the claim of a pod deleted during the start-up released "
              f"{time.monotonic() - began:.1f} s after the deletion")
    finally:
        hostile.operator.stop()
        hostile.operator.env = env
        hostile.operator.start(timeout=120)
    hostile.after_attack(f"a pod deleted before the watches started ({watch})")


# --------------------------------------------------------------------------- point 5


class Tenant:
    """Another namespace user (``edit`` in a namespace of their own, plus kdra's claims),
    with the ``gpu`` template there; :meth:`remove` deletes the namespace and its pods."""

    def __init__(self, hostile: Hostile, user: str) -> None:
        self.hostile = hostile
        self.user = user
        self.namespace = unique(user)
        plane = hostile.plane
        plane.kubectl("create", "namespace", self.namespace)
        for role in USER_ROLES:
            plane.kubectl("create", "rolebinding", f"{user}-{role}", "-n", self.namespace,
                          f"--clusterrole={role}", f"--user={user}")
        wait_for(lambda: plane.kubectl("get", "serviceaccount", "default", "-n",
                                       self.namespace, check=False).returncode == 0,
                 what=f"default ServiceAccount of {self.namespace}")
        self.run("create", "-f", "-", check=True,
                 input=json.dumps(template_body("gpu", self.namespace)))

    def run(self, *args: str, input: str | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.hostile.as_user(*args, namespace=self.namespace, input=input, check=check,
                                    user=self.user)

    def pods(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.hostile.plane.kubectl(
            "get", "pods", "-n", self.namespace, "-o", "json").stdout)["items"]
        return {p["metadata"]["uid"]: p for p in items
                if not p["metadata"].get("deletionTimestamp")}

    def remove(self) -> None:
        plane = self.hostile.plane
        plane.kubectl("delete", "deployments", "--all", "-n", self.namespace, check=False)
        plane.kubectl("delete", "pods", "--all", "-n", self.namespace, "--grace-period=0",
                      "--force", check=False)
        plane.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


def events(hostile: Hostile, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = json.loads(hostile.plane.kubectl("get", "events", "-n", namespace, "-o",
                                             "json").stdout)["items"]
    return [e for e in items if e.get("reason") == reason]


def scheduled_message(obj: dict[str, Any]) -> str:
    return next((c.get("message", "") for c in obj.get("status", {}).get("conditions") or ()
                 if c.get("type") == "PodScheduled"), "")


def claims_released(hostile: Hostile, namespace: str) -> bool:
    items = json.loads(hostile.plane.kubectl("get", CLAIMS, "-n", namespace, "-o",
                                             "json", check=False).stdout or '{"items": []}')
    return not any((c.get("status") or {}).get("allocation") for c in items["items"])


def test_hostile_a_tenant_at_its_quota_preempts_nobody(hostile: Hostile) -> None:
    """Issue: a pod over its DeviceQuota still preempted — a tenant at its quota (with
    ``system-cluster-critical``, which any tenant may use by upstream default) evicted
    another tenant's pods again and again and never bound. Here: tenant "mallory" holds its
    one GPU of quota; tenant "victor" runs a 3-replica Deployment on the node's other three
    GPUs; mallory's urgent pod fits nowhere. Then the docs' remedy: the priority policy of
    manifests/examples/priority refuses the class to mallory's namespace."""
    ns = hostile.namespace
    critical = {"priorityClassName": "system-cluster-critical"}
    victor = Tenant(hostile, "victor")
    quota = {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
             "metadata": {"name": "one-gpu", "namespace": ns},
             "spec": {"limits": [{"deviceClassName": GPU_CLASS, "devices": 1}]}}
    hostile.plane.kubectl("apply", "-f", "-", input=json.dumps(quota))  # the admin's
    holder, urgent = unique("holder"), unique("urgent")
    try:
        body = pod_body(holder, ns, TEMPLATE)
        body["spec"].update(critical)
        assert hostile.create_as_user(body).returncode == 0
        hostile.bound_pod(holder)
        replica = pod_body("x", victor.namespace, TEMPLATE)
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "training", "namespace": victor.namespace},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "training"}},
                     "template": {"metadata": {"labels": {"app": "training"},
                                               "annotations": replica["metadata"]["annotations"]},
                                  "spec": replica["spec"]}}}
        created = victor.run("create", "-f", "-", input=json.dumps(deployment))
        assert created.returncode == 0, created.stderr
        wait_for(lambda: sum(1 for p in victor.pods().values()
                             if p["spec"].get("nodeName")) == 3,
                 timeout=120, what="victor's three replicas bound")
        victims = set(victor.pods())

        body = pod_body(urgent, ns, TEMPLATE)
        body["spec"].update(critical)
        assert hostile.create_as_user(body).returncode == 0
        said = wait_for(lambda: "not preempting" in (m := scheduled_message(hostile.pod(
            urgent))) and m, what="the urgent pod's reason")
        time.sleep(10)  # at every attempt before, another eviction
        print(f"\n[preemption] urgent pod: {said}")
        evicted = events(hostile, victor.namespace, "Preempted")
        print(f"[preemption] victor's pods evicted: {len(evicted)}; still running: "
              f"{len(victims & set(victor.pods()))}/3")
        assert "DeviceQuota" in said and "1 used + 1 asked > 1 hard" in said
        assert evicted == [] and events(hostile, ns, "Preempting") == []
        assert victims == set(victor.pods())
        assert not hostile.pod(urgent)["spec"].get("nodeName")

        # The remedy docs/tenancy.md gives: high priorities for chosen namespaces only.
        policy = ROOT / "manifests" / "examples" / "priority"
        hostile.plane.kubectl("apply", "-k", str(policy))
        try:
            denied = wait_for(lambda: (r := hostile.create_as_user(body | {"metadata": {
                "name": unique("urgent"), "namespace": ns}})).returncode != 0 and r,
                what="the priority policy in force")
            hostile.denied(denied, "priority 2000000000 (priorityClassName "
                           "system-cluster-critical) is reserved to kube-system")
        finally:
            hostile.plane.kubectl("delete", "-k", str(policy), "--ignore-not-found",
                                  check=False)
    finally:
        delete_pods(hostile, holder, urgent)
        hostile.plane.kubectl("delete", "devicequota", "one-gpu", "-n", ns,
                              "--ignore-not-found", check=False)
        victor.remove()
        wait_for(lambda: claims_released(hostile, victor.namespace), timeout=60,
                 what="victor's GPUs released")
    hostile.after_attack("a tenant at its quota with a critical priority")


# --------------------------------------------------------------------------- point 6

ESC_LITERAL = "\x1b]0;pwned\x07\x1b[2J\x1b[8m"
"""Retitle the window, clear the screen, hide what follows."""


def cli(hostile: Hostile, *args: str, as_user: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``kubectl kdra ...`` (the plugin, as the user when ``as_user``) or ``kdra ...``."""
    kubeconfig = str(hostile.plane.kubeconfig)
    if args[0] == "kubectl-kdra":
        command = [sys.executable, "-m", "kdra.cli.kubectl", *args[1:], "--kubeconfig", kubeconfig]
        if as_user:
            command += ["--as", as_user]
    else:
        command = [sys.executable, "-m", "kdra", *args, "--kubeconfig", kubeconfig]
    return subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": ""})


def raw_controls(text: str) -> list[str]:
    """Control characters a terminal would obey (newlines and tabs are layout)."""
    return sorted({repr(c) for c in text if unicodedata.category(c) == "Cc"
                   and c not in "\n\t"} | {repr(c) for c in text if c in "\u202e\u2066"})


def test_hostile_escape_sequences_never_reach_a_terminal_or_an_event(hostile: Hostile) -> None:
    """Issue: ESC sequences in a tenant's CEL literal, or in an agent's ``productName`` /
    ``uuid``, were printed raw by ``kubectl kdra why``, ``kubectl kdra describe`` and ``kdra
    describe``, and carried in the PodScheduled message. Now each is shown escaped
    (``\\x1b]0;...``), wherever it is shown."""
    ns = hostile.namespace
    claim, name = unique("esc"), unique("esc")
    selector = (f'device.attributes["gpu.kdra.dev"].productName == "{ESC_LITERAL}" || '
                f'int("{ESC_LITERAL}\u202e") > 0')  # never true; fails at run time
    created = hostile.create_as_user({
        "apiVersion": API, "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": GPU_CLASS, "selectors": [{"cel": {"expression": selector}}]}}]}}})
    assert created.returncode == 0, created.stderr
    assert hostile.create_as_user(pod_body(name, ns, [
        {"name": "gpu", "resourceClaimName": claim}])).returncode == 0
    # A compromised agent publishes a device of its own node whose product name and UUID
    # are escape sequences (with its own token: a node may speak for its own devices).
    rogue = {"apiVersion": API, "kind": "ResourceSlice",
             "metadata": {"name": unique("rogue")},
             "spec": {"driver": "rogue.example.com", "nodeName": hostile.node,
                      "pool": {"name": hostile.node, "generation": 0, "resourceSliceCount": 1},
                      "devices": [{"name": "dev-0", "attributes": {
                          "productName": {"string": f"H100{ESC_LITERAL}"},
                          "uuid": {"string": f"GPU-{ESC_LITERAL}"}}}]}}
    agent = ["--kubeconfig", str(hostile.work / "kdra-agent.kubeconfig")]
    published = subprocess.run([str(hostile.plane.bin_dir / "kubectl"), *agent, "create",
                                "-f", "-"], input=json.dumps(rogue), capture_output=True,
                               text=True)
    assert published.returncode == 0, published.stderr
    try:
        condition = wait_for(lambda: scheduled_message(hostile.pod(name)),
                             what="the pod reported unschedulable")
        outputs = {  # as an administrator looking into it would run them (and the tenant)
            "kubectl kdra why": cli(hostile, "kubectl-kdra", "why", name, "-n", ns),
            "kubectl kdra why (as the tenant)": cli(hostile, "kubectl-kdra", "why", name,
                                                    "-n", ns, as_user=USER),
            "kubectl kdra describe": cli(hostile, "kubectl-kdra", "describe"),
            "kdra describe": cli(hostile, "describe"),
        }
        for what, result in outputs.items():
            assert result.returncode == 0, f"{what}: {result.stderr}"
            shown = result.stdout + result.stderr
            assert raw_controls(shown) == [], f"{what} printed {raw_controls(shown)}"
        why = outputs["kubectl kdra why"].stdout
        assert '== "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[8m"' in why  # the selector, escaped
        for what in ("kubectl kdra describe", "kdra describe"):
            assert "H100\\x1b]0;pwned\\x07" in outputs[what].stdout, outputs[what].stdout
        print(f"\n[terminal] kubectl kdra why shows: "
              f"{next(line for line in why.splitlines() if 'pwned' in line).strip()[:160]}")
        # What kubectl describe would print: the condition and the events.
        messages = [condition, *(e["message"] for e in json.loads(hostile.plane.kubectl(
            "get", "events", "-n", ns, "-o", "json").stdout)["items"]
            if e["involvedObject"]["name"] in (name, claim))]
        print(f"[terminal] PodScheduled: {condition[:300]}")
        assert all(raw_controls(m) == [] for m in messages), messages
        log = hostile.operator.log.read_text(errors="replace") if hostile.operator else ""
        assert raw_controls(log) == [], "the operator's log holds raw control characters"
    finally:
        hostile.plane.kubectl("delete", "resourceslice.resource.kdra.dev",
                              rogue["metadata"]["name"], "--ignore-not-found", check=False)
        delete_pods(hostile, name)
        hostile.plane.kubectl("delete", CLAIMS, claim, "-n", ns, "--ignore-not-found",
                              check=False)
    hostile.after_attack("escape sequences in a selector and a device's attributes")


# --------------------------------------------------------------------------- point 7


class MutatingOff:
    """kdra's mutating webhook away for a ``with`` block (an outage, an object from before
    a rule): for storing a pod it would deny."""

    def __init__(self, hostile: Hostile) -> None:
        self.hostile = hostile
        self.saved: dict[str, Any] | None = None

    def __enter__(self) -> MutatingOff:
        plane = self.hostile.plane
        self.saved = json.loads(plane.kubectl("get", "mutatingwebhookconfiguration",
                                              MUTATING_CONFIG, "-o", "json").stdout)
        plane.kubectl("patch", "mutatingwebhookconfiguration", MUTATING_CONFIG, "--type=json",
                      "-p", json.dumps([{"op": "replace", "path": "/webhooks", "value": []}]))
        time.sleep(2)  # the API server picks configuration changes up asynchronously
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.saved is not None
        self.hostile.plane.kubectl(
            "patch", "mutatingwebhookconfiguration", MUTATING_CONFIG, "--type=json", "-p",
            json.dumps([{"op": "replace", "path": "/webhooks", "value": self.saved["webhooks"]}]))
        time.sleep(2)


def invalid_reason(hostile: Hostile, name: str) -> str | None:
    for c in hostile.pod(name).get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("reason") == "InvalidPod":
            return str(c.get("message"))
    return None


def test_hostile_a_pod_may_not_take_another_pods_generated_claim(hostile: Hostile) -> None:
    """Issue: a pod naming another pod's generated claim directly (``resourceClaimName``)
    got it reserved and bound: the victim's GPU, shared with a pod it was never meant for.
    Upstream: a generated claim serves only the pod it was generated for (IsForPod)."""
    ns = hostile.namespace
    victim = unique("victim")
    assert hostile.create_as_user(pod_body(victim, ns, TEMPLATE)).returncode == 0
    victim_pod = hostile.bound_pod(victim)
    stolen = json.loads(victim_pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])["gpu"]
    before = json.loads(hostile.plane.kubectl("get", CLAIMS, stolen, "-n", ns, "-o",
                                              "json").stdout)
    thief = pod_body(unique("thief"), ns, [{"name": "gpu", "resourceClaimName": stolen}],
                     scheduler="kdra-scheduler")
    hostile.denied(hostile.create_as_user(thief),
                   f"claim '{stolen}' was generated for pod '{victim}' and serves only "
                   "that pod")
    with MutatingOff(hostile):  # stored anyway
        assert hostile.create_as_user(thief).returncode == 0
    name = thief["metadata"]["name"]
    try:
        message = wait_for(lambda: invalid_reason(hostile, name), what="the thief refused")
        print(f"\n[kdra-scheduler] {message}")
        assert f"claim '{stolen}' (entry 'gpu') was generated for pod '{victim}'" in message
        time.sleep(2)  # room for a wrong reservation
        after = json.loads(hostile.plane.kubectl("get", CLAIMS, stolen, "-n", ns, "-o",
                                                 "json").stdout)
        assert [r["uid"] for r in after["status"]["reservedFor"]] == \
            [victim_pod["metadata"]["uid"]]
        assert after["status"]["allocation"] == before["status"]["allocation"]
        assert not hostile.pod(name)["spec"].get("nodeName")
        checked = hostile.check()
        print(f"[kdra check] rc {checked.returncode}: {checked.stdout.strip()}")
        assert checked.returncode == 1
        assert f"foreign-claim: pod {ns}/{name} names claim {ns}/{stolen}" in checked.stdout
    finally:
        delete_pods(hostile, name, victim)
    hostile.after_attack("a pod naming another pod's generated claim")


def test_hostile_device_variables_outside_the_claims_containers(hostile: Hostile) -> None:
    """Issue: ``NVIDIA_VISIBLE_DEVICES=all`` in an init container, in a sidecar the claims
    do not name (``env``, or ``envFrom`` a ConfigMap), or in a claimless kdra-scheduler pod
    was admitted and bound — every GPU of the node for that container (the NVIDIA runtime
    reads the variable); ``kdra check`` missed the ``envFrom`` case."""
    ns = hostile.namespace
    every_gpu = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    entry = [{"name": "gpu", "resourceClaimTemplateName": "gpu", "containers": ["main"]}]

    def with_container(body: dict[str, Any], kind: str, **extra: Any) -> dict[str, Any]:
        body["spec"].setdefault(kind, []).append({"name": "side", "image": PAUSE, **extra})
        return body

    attacks = {
        "init container": (with_container(pod_body(unique("init"), ns, entry),
                                          "initContainers", env=every_gpu),
                           "spec.initContainers[0].env[0]"),
        "sidecar": (with_container(pod_body(unique("sidecar"), ns, entry), "containers",
                                   env=every_gpu), "spec.containers[1].env[0]"),
        "claimless kdra-scheduler pod": (pod_body(unique("bare"), ns, env=every_gpu,
                                                  scheduler="kdra-scheduler"),
                                         "spec.containers[0].env[0]"),
    }
    for body, field in attacks.values():
        hostile.denied(hostile.create_as_user(body), field,
                       "NVIDIA_VISIBLE_DEVICES is set by kdra only")
    # Stored anyway (the validating webhook away): kdra-scheduler does not bind them.
    names = [body["metadata"]["name"] for body, _ in attacks.values()]
    with hostile.without_webhook(VALIDATE_PODS):
        for body, _ in attacks.values():
            result = hostile.create_as_user(body)
            assert result.returncode == 0, result.stderr
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": unique("gpu-settings"), "namespace": ns},
              "data": {"NVIDIA_VISIBLE_DEVICES": "all", "LOG_LEVEL": "debug"}}
    from_config = with_container(pod_body(unique("envfrom"), ns, entry), "containers",
                                 envFrom=[{"configMapRef": {"name": config["metadata"]["name"]}}])
    names.append(from_config["metadata"]["name"])
    try:
        for name in names[:3]:
            message = wait_for(lambda n=name: invalid_reason(hostile, n),  # type: ignore[misc]
                               what=f"{name} refused")
            assert "NVIDIA_VISIBLE_DEVICES is set by kdra only" in message
        print(f"\n[kdra-scheduler] {message}")
        # envFrom cannot be judged at admission (the ConfigMap may change): a warning, and
        # kdra check names it once the pod is bound.
        assert hostile.create_as_user(config).returncode == 0
        created = hostile.create_as_user(from_config)
        assert created.returncode == 0, created.stderr
        print(f"[admitted with] {created.stderr.strip()[:300]}")
        assert "spec.containers[1].envFrom[0]: if its ConfigMap or Secret sets" in created.stderr
        hostile.bound_pod(from_config["metadata"]["name"])
        # An ephemeral container (kubectl debug) added to the bound pod: denied too. `edit`
        # may not add one; a namespace user given the right to debug pods may.
        hostile.plane.kubectl("create", "role", "debugger", "-n", ns,
                              "--verb=get,patch,update", "--resource=pods/ephemeralcontainers")
        hostile.plane.kubectl("create", "rolebinding", "debugger", "-n", ns, "--role=debugger",
                              f"--user={USER}")
        debug = {"spec": {"ephemeralContainers": [
            {"name": "debugger", "image": PAUSE, "env": every_gpu}]}}
        hostile.denied(hostile.as_user("patch", "pod", from_config["metadata"]["name"],
                                       "--subresource=ephemeralcontainers",
                                       "--type=strategic", "-p", json.dumps(debug)),
                       "spec.ephemeralContainers[0].env[0]",
                       "NVIDIA_VISIBLE_DEVICES is set by kdra only")
        checked = hostile.check()
        print(f"[kdra check] rc {checked.returncode}: {checked.stdout.strip()}")
        assert checked.returncode == 1
        assert (f"forged-env: pod {ns}/{from_config['metadata']['name']} container side: "
                f"NVIDIA_VISIBLE_DEVICES from ConfigMap {ns}/{config['metadata']['name']} "
                f"(envFrom) is 'all' on node {hostile.node}") in checked.stdout
        for name in names[:3]:
            assert not hostile.pod(name)["spec"].get("nodeName")
    finally:
        delete_pods(hostile, *names)
        hostile.plane.kubectl("delete", "configmap", config["metadata"]["name"], "-n", ns,
                              "--ignore-not-found", check=False)
        hostile.plane.kubectl("delete", "rolebinding,role", "debugger", "-n", ns,
                              "--ignore-not-found", check=False)
    hostile.after_attack("device variables outside the claims' containers")
