"""The two API flavours at the edge (kdra.kube.core.flavours, native_pods, kdra.kube.flavour):
a native pod's claims and their names, the record written, the generated claim, choosing a
flavour — and parsing a native pod is total, whatever it holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.errors import InvalidObject
from kdra.kube.core.flavours import KDRA, NATIVE, flavour_named, read_flavour, settled
from kdra.kube.core.native_pods import MAX_ENTRIES, claim_statuses, pod_claims
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, PodClaim
from kdra.kube.errors import Forbidden, NotFound
from kdra.kube.flavour import FlavourError, resolve


def native_pod(entries: list[Any], containers: list[Any] | None = None,
               statuses: list[Any] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"resourceClaims": entries,
                 "containers": containers if containers is not None else [{"name": "c"}]}}
    if statuses is not None:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod


def uses(*claims: dict[str, str], name: str = "c") -> dict[str, Any]:
    return {"name": name, "resources": {"claims": list(claims)}}


def test_a_native_pods_claims_and_which_containers_use_them() -> None:
    pod = native_pod(
        [{"name": "shared", "resourceClaimName": "gpus"},
         {"name": "own", "resourceClaimTemplateName": "one-gpu"},
         {"name": "unused", "resourceClaimTemplateName": "t"}],
        [uses({"name": "shared"}, {"name": "own", "request": "r"}, name="a"),
         uses({"name": "own", "request": "r"}, name="b"),
         uses({"name": "shared", "request": "x"}, name="c")])
    pod["spec"]["initContainers"] = [uses({"name": "own", "request": "r"}, name="init")]
    assert NATIVE.pod_claims(pod) == (
        PodClaim("shared", "gpus", None, ("a", "c"), None),  # requests differ: none singled
        PodClaim("own", None, "one-gpu", ("init", "a", "b"), "r"),
        PodClaim("unused", None, "t", (), None))  # no container: none (not "every")
    assert NATIVE.has_claims(pod) and not KDRA.has_claims(pod)
    assert NATIVE.pod_claims({"metadata": {}, "spec": {}}) == ()
    # The annotation means nothing in the native flavour, and the spec nothing in kdra's.
    annotated = {"metadata": {"annotations": {CLAIMS_ANNOTATION: "[]"}}, "spec": {}}
    assert not NATIVE.has_claims(annotated) and KDRA.has_claims(annotated)
    assert KDRA.pod_claims(pod) == ()


@pytest.mark.parametrize(("entries", "containers", "field", "words"), [
    ("gpus", None, "spec.resourceClaims", "must be a list"),
    (["x"], None, "spec.resourceClaims[0]", "must be an object"),
    ([{"name": "Bad_Name", "resourceClaimName": "c"}], None, "spec.resourceClaims[0].name",
     "DNS label"),
    ([{"name": "a", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}], None,
     "spec.resourceClaims[0]", "exactly one of"),
    ([{"name": "a"}], None, "spec.resourceClaims[0]", "exactly one of"),
    ([{"name": "a", "resourceClaimName": "../secrets"}], None,
     "spec.resourceClaims[0].resourceClaimName", "DNS subdomain"),
    ([{"name": "a", "resourceClaimName": "c"}, {"name": "a", "resourceClaimName": "d"}], None,
     "spec.resourceClaims[1].name", "duplicate"),
    ([{"name": "a", "resourceClaimName": "c"}] * (MAX_ENTRIES + 1), None,
     "spec.resourceClaims", f"at most {MAX_ENTRIES}"),
    ([{"name": "a", "resourceClaimName": "c"}], [uses({"name": 7})],
     "spec.containers[0].resources.claims[0]", "must name an entry"),
    ([{"name": "a", "resourceClaimName": "c"}], [{"name": "c", "resources": {"claims": "a"}}],
     "spec.containers[0].resources.claims", "must be a list"),
])
def test_a_malformed_native_pod_is_refused_naming_the_field(
        entries: Any, containers: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        pod_claims(native_pod(entries, containers))
    assert caught.value.field == field and words in caught.value.message, caught.value


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "resourceClaimName", "resourceClaimTemplateName",
                         "resources", "claims", "request", "containers", "x"]),
        inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(spec=st.dictionaries(st.sampled_from(["resourceClaims", "containers",
                                             "initContainers"]), JSONISH, max_size=3),
       status=JSONISH)
def test_parsing_a_native_pod_is_total(spec: dict[str, Any], status: Any) -> None:
    pod = {"metadata": {"name": "p"}, "spec": spec, "status": status}
    try:
        claims = pod_claims(pod)
    except InvalidObject:
        claims = ()
    for entry in claims:  # whatever comes out is safe as a URL path segment
        for name in (entry.name, entry.resource_claim_name, entry.resource_claim_template_name):
            assert name is None or ("/" not in name and ".." not in name)
    for key, value in claim_statuses(pod).items():
        assert "/" not in key and "/" not in value


def test_the_record_of_claim_names() -> None:
    entries = (PodClaim("shared", "gpus"), PodClaim("own", None, "t"))
    names = {"shared": "gpus", "own": "p-own-abcde"}
    pod = native_pod([{"name": "shared", "resourceClaimName": "gpus"},
                      {"name": "own", "resourceClaimTemplateName": "t"}])
    # Native: upstream's controller records the generated claims only, on pods/status.
    assert NATIVE.statuses_write(pod, entries, names) == ("status", {
        "metadata": {"resourceVersion": "7"},
        "status": {"resourceClaimStatuses": [{"name": "own",
                                              "resourceClaimName": "p-own-abcde"}]}})
    pod["status"] = {"resourceClaimStatuses": [{"name": "own",
                                                "resourceClaimName": "p-own-abcde"}]}
    assert NATIVE.claim_statuses(pod) == {"own": "p-own-abcde"}
    assert NATIVE.statuses_write(pod, entries, names) is None  # already said
    # kdra: every entry, in the annotation.
    subresource, patch = KDRA.statuses_write(pod, entries, names) or (None, {})
    assert subresource is None and patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["annotations"] == {
        "resource.kdra.dev/claim-statuses": '{"own": "p-own-abcde", "shared": "gpus"}'}
    # Malformed records are ignored, not trusted as names.
    assert claim_statuses({"status": {"resourceClaimStatuses": [
        {"name": "a", "resourceClaimName": "../../secrets"}, {"name": "b"}, "x",
        {"name": "c", "resourceClaimName": "fine"}]}}) == {"c": "fine"}


def test_the_generated_claim_and_its_marks_per_flavour() -> None:
    pod = native_pod([{"name": "own", "resourceClaimTemplateName": "t"}])
    template = {"spec": {"metadata": {"labels": {"l": "v"}}, "spec": {"devices": {}}}}
    made = NATIVE.generated_claim(template, pod, PodClaim("own", None, "t"))
    assert made["apiVersion"] == "resource.k8s.io/v1"
    assert made["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "own"}
    assert made["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert made["metadata"]["generateName"] == "p-own-"
    assert made["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True,
        "blockOwnerDeletion": True}]
    claim = {**made, "metadata": {**made["metadata"], "name": "p-own-x"}}
    assert NATIVE.is_generated(claim) and NATIVE.generated_for(claim) is not None
    assert NATIVE.protected(claim)
    # kdra's marks are not upstream's: each flavour reads its own.
    assert not KDRA.is_generated(claim) and KDRA.generated_for(claim) is None
    assert not KDRA.protected(claim)
    status: dict[str, Any] = {}
    NATIVE.set_allocation(status, {"devices": {"results": [{"device": "gpu-0"}]}})
    assert "allocatedDevices" not in status  # upstream's API has no such field
    KDRA.set_allocation(status, {"devices": {"results": [{"device": "gpu-0"}]}})
    assert status["allocatedDevices"] == "gpu-0"


def test_where_the_kinds_live() -> None:
    assert NATIVE.claims.path("ns", "c", "status") == \
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status"
    assert KDRA.slices.path() == "/apis/resource.kdra.dev/v1/resourceslices"
    assert flavour_named("native") is NATIVE and settled("") is KDRA
    assert settled("native") is NATIVE
    with pytest.raises(ValueError, match="unknown flavour 'v1'"):
        flavour_named("v1")


class Discovery:
    """The API server's answer to ``GET /apis/resource.k8s.io/v1``."""

    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.paths: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.paths.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


SERVED = {"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1",
          "resources": [{"name": "resourceclaims"}, {"name": "resourceclaims/status"}]}


@pytest.mark.parametrize(("setting", "answer", "expected"), [
    ("", SERVED, "native"),
    ("auto", SERVED, "native"),
    ("", NotFound(404, "NotFound", "no"), "kdra"),
    ("kdra", SERVED, "kdra"),
    ("native", SERVED, "native"),
    ("Native ", SERVED, "native"),
])
def test_choosing_the_flavour(setting: str, answer: Any, expected: str) -> None:
    client = Discovery(answer)
    assert asyncio.run(resolve(client, setting)).name == expected  # type: ignore[arg-type]
    assert client.paths in ([], ["/apis/resource.k8s.io/v1"])


@pytest.mark.parametrize(("setting", "answer", "error"), [
    ("native", NotFound(404, "NotFound", "no"), FlavourError),
    ("v1alpha3", SERVED, FlavourError),
    ("", Forbidden(403, "Forbidden", "no"), Forbidden),  # never a guess
])
def test_a_flavour_that_cannot_be_had_stops_the_start(setting: str, answer: Any,
                                                      error: type[Exception]) -> None:
    with pytest.raises(error):
        asyncio.run(resolve(Discovery(answer), setting))  # type: ignore[arg-type]


@pytest.mark.parametrize(("native_served", "kdra_served", "kdra_slices", "expected"), [
    (True, False, False, "native"),   # a cluster with DRA and no kdra CRDs
    (False, True, True, "kdra"),      # an older cluster: kdra's CRDs only
    (False, True, False, "kdra"),
    (False, False, False, "kdra"),    # neither: kdra's, whose reads then say what is missing
    (True, True, False, "native"),    # both served, kdra's kind empty: kdra runs native
    (True, True, True, "kdra"),       # both, kdra's agents publish into kdra's kind
])
def test_the_flavour_a_command_line_tool_reads(native_served: bool, kdra_served: bool,
                                               kdra_slices: bool, expected: str) -> None:
    assert read_flavour(native_served=native_served, kdra_served=kdra_served,
                        kdra_slices=kdra_slices).name == expected
