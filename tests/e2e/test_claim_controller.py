"""The claim controller against a real API server, with the operator as a real process."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import yaml

from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    generate_name_prefix,
)
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for

CAT_CLASS = "resource.example.com"


def template(name: str, namespace: str, color: str = "black", size: str = "large") -> dict:
    return {
        "apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "metadata": {"labels": {"cat": "yes"}, "annotations": {"from": "template"}},
            "spec": {"devices": {"requests": [{
                "name": "cat", "deviceClassName": CAT_CLASS,
                "selectors": [{"cel": {"expression":
                    f'device.attributes["resource-driver.example.com"].color == "{color}" && '
                    f'device.attributes["resource-driver.example.com"].size == "{size}"'}}],
            }]}},
        },
    }


def claim(name: str, namespace: str) -> dict:
    return {
        "apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "cat", "deviceClassName": CAT_CLASS}]}},
    }


def pod(name: str, namespace: str, claims: Any) -> dict:
    text = claims if isinstance(claims, str) else yaml.safe_dump(claims)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {CLAIMS_ANNOTATION: text}},
        "spec": {"schedulerName": "kdra-scheduler",
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }


SEED_CLAIMS = [
    {"name": "cat-0", "resourceClaimName": "small-white-cat-claim"},
    {"name": "cat-1", "resourceClaimTemplateName": "large-black-cat-claim-template"},
]


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def statuses(plane: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    obj = get_json(plane, "pod", name, "-n", namespace)
    return json.loads(obj["metadata"].get("annotations", {}).get(CLAIM_STATUSES_ANNOTATION, "{}"))


def claims_in(plane: ControlPlane, namespace: str) -> list[dict]:
    return list(get_json(plane, "resourceclaims.resource.kdra.dev", "-n", namespace)["items"])


def events_for(plane: ControlPlane, namespace: str, name: str) -> list[dict]:
    items = get_json(plane, "events", "-n", namespace,
                     "--field-selector", f"involvedObject.name={name}")["items"]
    return list(items)


def test_seed_pod_with_cats(control_plane: ControlPlane, operator: KdraProcess,
                            namespace: str) -> None:
    apply(control_plane, template("large-black-cat-claim-template", namespace),
          claim("small-white-cat-claim", namespace),
          pod("pod-with-cats", namespace, SEED_CLAIMS))
    names = wait_for(lambda: (s := statuses(control_plane, namespace, "pod-with-cats"))
                     and len(s) == 2 and s, what="claim-statuses annotation")
    assert names["cat-0"] == "small-white-cat-claim"
    assert re.fullmatch(r"pod-with-cats-cat-1-[a-z0-9]{5}", names["cat-1"]), names
    generated = get_json(control_plane, "resourceclaims.resource.kdra.dev", names["cat-1"],
                         "-n", namespace)
    pod_uid = get_json(control_plane, "pod", "pod-with-cats", "-n", namespace)["metadata"]["uid"]
    meta = generated["metadata"]
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod",
                                        "name": "pod-with-cats", "uid": pod_uid,
                                        "controller": True, "blockOwnerDeletion": True}]
    assert meta["annotations"][POD_CLAIM_NAME_ANNOTATION] == "cat-1"
    assert meta["annotations"]["from"] == "template"
    assert meta["labels"]["cat"] == "yes"
    stored = get_json(control_plane, "resourceclaimtemplates.resource.kdra.dev",
                      "large-black-cat-claim-template", "-n", namespace)
    assert generated["spec"] == stored["spec"]["spec"]
    # cat-0 is shared: nothing was created for it.
    assert sorted(c["metadata"]["name"] for c in claims_in(control_plane, namespace)) == \
        sorted(["small-white-cat-claim", names["cat-1"]])
    assert 'kdra_resourceclaim_controller_creates_total{status="success"}' in operator.metrics()


def test_long_names_are_truncated_like_upstream(control_plane: ControlPlane,
                                                operator: KdraProcess, namespace: str) -> None:
    pod_name = "p" + "o" * 80  # 81 characters
    entry = "a-rather-long-claim-entry-name"  # 30 characters: 113 in total
    apply(control_plane, template("t", namespace),
          pod(pod_name, namespace, [{"name": entry, "resourceClaimTemplateName": "t"}]))
    names = wait_for(lambda: statuses(control_plane, namespace, pod_name), what="claim name")
    prefix = generate_name_prefix(pod_name, entry)
    assert len(prefix) <= 57
    assert names[entry].startswith(prefix)
    assert len(names[entry]) == len(prefix) + 5


def allocate(plane: ControlPlane, namespace: str, claim_name: str, pod_name: str) -> None:
    """Play the binder: allocate the claim to a device and reserve it for the pod."""
    pod_obj = get_json(plane, "pod", pod_name, "-n", namespace)
    plane.kubectl("patch", "resourceclaims.resource.kdra.dev", claim_name, "-n", namespace,
                  "--type=merge", "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
    plane.kubectl("patch", "resourceclaims.resource.kdra.dev", claim_name, "-n", namespace,
                  "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
                      "allocation": {"devices": {"results": [{
                          "request": "cat", "driver": "resource-driver.example.com",
                          "pool": "worker-1", "device": "large-black-cat"}]}},
                      "reservedFor": [{"resource": "pods", "name": pod_name,
                                       "uid": pod_obj["metadata"]["uid"]}],
                  }}))


def finish(plane: ControlPlane, namespace: str, pod_name: str) -> None:
    plane.kubectl("patch", "pod", pod_name, "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", '{"status": {"phase": "Succeeded"}}')


def test_release_when_pod_finishes(control_plane: ControlPlane, operator: KdraProcess,
                                   namespace: str) -> None:
    apply(control_plane, template("large-black-cat-claim-template", namespace),
          claim("small-white-cat-claim", namespace), pod("p1", namespace, SEED_CLAIMS))
    names = wait_for(lambda: len(s := statuses(control_plane, namespace, "p1")) == 2 and s)
    allocate(control_plane, namespace, "small-white-cat-claim", "p1")
    allocate(control_plane, namespace, names["cat-1"], "p1")
    time.sleep(1)  # the controller must not release a claim of a running pod
    shared = get_json(control_plane, "resourceclaims.resource.kdra.dev",
                      "small-white-cat-claim", "-n", namespace)
    assert shared["status"]["reservedFor"][0]["name"] == "p1"

    finish(control_plane, namespace, "p1")

    def released() -> dict | None:
        obj = get_json(control_plane, "resourceclaims.resource.kdra.dev",
                       "small-white-cat-claim", "-n", namespace)
        status = obj.get("status", {})
        done = ("allocation" not in status
                and FINALIZER not in obj["metadata"].get("finalizers", []))
        return obj if done else None

    shared = wait_for(released, what="shared claim released and deallocated")
    # No consumer left: no field at all (upstream's omitempty), not an empty list.
    assert "reservedFor" not in shared.get("status", {}), shared["status"]
    # The generated claim of a finished pod is deleted (the garbage collector would not:
    # the pod still exists).
    wait_for(lambda: [c["metadata"]["name"] for c in claims_in(control_plane, namespace)]
             == ["small-white-cat-claim"], what="generated claim deleted")
    assert "kdra_resourceclaim_controller_releases_total" in operator.metrics()


def test_deleted_pod_releases_and_deletes(control_plane: ControlPlane, operator: KdraProcess,
                                          namespace: str) -> None:
    apply(control_plane, template("t", namespace),
          pod("p2", namespace, [{"name": "gpu", "resourceClaimTemplateName": "t"}]))
    names = wait_for(lambda: statuses(control_plane, namespace, "p2"))
    allocate(control_plane, namespace, names["gpu"], "p2")
    control_plane.kubectl("delete", "pod", "p2", "-n", namespace, "--wait=false")
    wait_for(lambda: not claims_in(control_plane, namespace), what="generated claim gone")


def test_bad_input_gets_events_and_others_are_served(control_plane: ControlPlane,
                                                     operator: KdraProcess,
                                                     namespace: str) -> None:
    apply(control_plane,
          pod("bad-yaml", namespace, "- {name: x, resourceClaimName"),
          pod("both-refs", namespace, [{"name": "x", "resourceClaimName": "a",
                                        "resourceClaimTemplateName": "b"}]),
          pod("dupes", namespace, [{"name": "x", "resourceClaimName": "a"},
                                   {"name": "x", "resourceClaimName": "b"}]),
          pod("no-template", namespace, [{"name": "x", "resourceClaimTemplateName": "later"}]),
          template("t", namespace),
          pod("good", namespace, [{"name": "x", "resourceClaimTemplateName": "t"}]))
    expected = {
        "bad-yaml": ("InvalidResourceClaims", "not valid YAML/JSON"),
        "both-refs": ("InvalidResourceClaims", "exactly one of resourceClaimName or "
                                               "resourceClaimTemplateName must be set"),
        "dupes": ("InvalidResourceClaims", "duplicate entry name 'x'"),
        "no-template": ("FailedResourceClaimCreation", "resource claim template 'later'"),
    }
    for name, (reason, text) in expected.items():
        found = wait_for(lambda n=name, r=reason, t=text: [
            e for e in events_for(control_plane, namespace, n)
            if e["reason"] == r and t in e["message"] and e["type"] == "Warning"],
            what=f"{reason} event on {name}")
        print(f"{name}: {found[0]['reason']}: {found[0]['message']}")
    assert wait_for(lambda: statuses(control_plane, namespace, "good"))
    # The missing template appears: the waiting pod gets its claim.
    apply(control_plane, template("later", namespace))
    assert wait_for(lambda: statuses(control_plane, namespace, "no-template"),
                    what="claim after the template appeared")
    assert operator.alive


def test_restart_during_burst_creates_no_duplicates(control_plane: ControlPlane,
                                                    tmp_path: Any, namespace: str) -> None:
    count = 200
    proc = KdraProcess(["operator", "--health-port", "0"], tmp_path / "operator.log",
                       control_plane.kubeconfig, ready_line="kdra operator started").start()
    try:
        apply(control_plane, template("t", namespace))
        pods = [pod(f"burst-{i:03d}", namespace, [{"name": "gpu",
                                                     "resourceClaimTemplateName": "t"}])
                for i in range(count)]
        started = time.monotonic()
        creator = control_plane.kubectl_async("apply", "-f", "-",
                                              input="\n---\n".join(json.dumps(p) for p in pods))
        time.sleep(1.5)
        proc.kill()  # in the middle of the burst
        creator.wait(120)
        proc.start()

        def settled() -> list[dict] | None:
            items = get_json(control_plane, "pods", "-n", namespace)["items"]
            done = [p for p in items if CLAIM_STATUSES_ANNOTATION in
                    p["metadata"].get("annotations", {})]
            return items if len(done) == count else None

        items = wait_for(settled, timeout=240, interval=1, what="all pods recorded")
        elapsed = time.monotonic() - started
        claims = claims_in(control_plane, namespace)
        owners = [c["metadata"]["ownerReferences"][0]["uid"] for c in claims]
        duplicates = len(owners) - len(set(owners))
        print(f"{count} pods: {len(claims)} claims, {duplicates} duplicates, "
              f"settled in {elapsed:.1f}s")
        assert len(claims) == count
        assert duplicates == 0
        by_name = {c["metadata"]["name"]: c for c in claims}
        for item in items:
            recorded = json.loads(item["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
            owner = by_name[recorded["gpu"]]["metadata"]["ownerReferences"][0]
            assert owner["uid"] == item["metadata"]["uid"]
    finally:
        proc.stop()
