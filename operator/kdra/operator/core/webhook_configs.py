"""The admission webhook configurations kdra installs, as plain objects: names, paths, rules.

The operator writes these (``kdra.operator.webhooks.server``) when it manages the configurations,
with the CA bundle of the certificate it serves; ``manifests/webhooks/`` holds the same objects for
a hand-made install (a unit test keeps the two identical, CA bundle aside).

Failure policy — the trade-off, written down once:

* ``failurePolicy: Fail`` everywhere. For kdra's own kinds, ``Ignore`` would let a selector
  that cannot compile into the cluster, where it fails every allocation later; for pods with
  the claims annotation, ``Ignore`` would let a pod through *without* ``schedulerName:
  kdra-scheduler``, and the default scheduler would run it with no devices. Failing closed
  costs little: while no operator replica serves the webhook, nothing could allocate those
  objects anyway.
* Ordinary pods are never affected, even while the webhook is down: the pod webhooks carry
  ``matchConditions`` expressions (evaluated by the API server itself) so that only requests
  that create or change kdra's keys on a pod are sent, and they skip ``kube-system``:
  ``mutate-pods`` gets the creations of pods with the claims annotation and of pods that ask
  for an extended resource (``<domain>/<name>`` in a container's limits or requests; the
  exception to "never affected": the condition cannot know which names DeviceClasses serve,
  so pods using a device plugin's resource such as ``nvidia.com/gpu`` go through kdra's
  webhook too, which leaves them unchanged, and are refused while no replica serves it — a
  ReplicaSet retries — the price of never letting a pod that asks for kdra's
  ``gpu.kdra.dev/gpu`` reach the default scheduler, where it would wait forever);
  ``validate-pods`` gets the creations of pods with the claims annotation or
  ``schedulerName: kdra-scheduler`` (kdra binds those to its GPU nodes, claims or not: their
  device variables are checked), the ephemeral containers added to such pods, and the
  updates that change the annotation; ``protect-pods`` gets the creations and updates that
  write kdra-owned keys (claim-statuses, ``devices.`` / ``gpus.resource.kdra.dev/*``) by
  anyone but kdra's own identities (the ``trusted`` usernames: the operator's
  ServiceAccount), so kdra's own writes (the claim controller's claim-statuses) never wait
  for a webhook, and users' are denied — and those that write the NRI tolerance
  (``tolerate-missing-plugins.kdra.dev``: start without kdra's NRI plugin) outside kdra's
  namespace, which are denied too.
* The one exception to ``Fail``: ``notice-pods`` (the same ``/mutate-pods``, for pods no
  other kdra webhook gets) only warns — ``spec.resourceClaims``, which kdra's flavour does not
  read, or an annotation key mentioning kdra that is none of kdra's (a typo of the claims
  key): ``failurePolicy: Ignore``, since nothing is lost while it is down but the warning.
* For DeviceClasses, an update that leaves ``spec`` unchanged (labels, finalizers) is not sent
  either, so metadata edits keep working during an outage.

The same server converts kdra's objects between API versions (``/convert``): the CRDs'
``spec.conversion`` (:func:`conversion`) points there, with the same CA bundle.

Invariants:
- Pure data: ``clientConfig`` is a URL (out-of-cluster use, tests) or the Service
  ``kdra-webhook`` in the operator's namespace, port 443; the CA bundle is passed in.
- ``sideEffects: None``, ``timeoutSeconds: 5``, ``admissionReviewVersions: [v1]``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra import GROUP, VERSION
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION_PREFIX,
    GPU_UUIDS_ANNOTATION_PREFIX,
    NRI_TOLERATE_ANNOTATION,
    SCHEDULER_NAME,
)
from kdra.operator.core.pod_notices import NOTICE_POD_CONDITION

__all__ = [
    "CONVERT_PATH",
    "CRD_NAMES",
    "EXTENDED_RESOURCES_CONDITION",
    "HEALTHZ_PATH",
    "KDRA_POD_CONDITION",
    "LABELS",
    "MUTATE_PODS_PATH",
    "MUTATE_POD_CONDITION",
    "MUTATING_CONFIG",
    "NATIVE_FOREIGN_CLAIM_CONDITION",
    "NATIVE_SCHEDULER_CONDITION",
    "OPERATOR_SERVICE_ACCOUNT",
    "POD_MATCH_CONDITION",
    "SCHEDULER_FOR_CLAIMS",
    "SCHEDULER_LABEL",
    "SERVICE_NAME",
    "SERVICE_PORT",
    "TLS_SECRET",
    "VALIDATE_PATH",
    "VALIDATE_POD_CONDITION",
    "VALIDATING_CONFIG",
    "Endpoint",
    "contains",
    "conversion",
    "mutating_configuration",
    "operator_username",
    "service_dns_names",
    "trusted_usernames",
    "validating_configuration",
]

MUTATING_CONFIG = "kdra-mutating"
VALIDATING_CONFIG = "kdra-validating"
SERVICE_NAME = "kdra-webhook"
SERVICE_PORT = 443
TLS_SECRET = "kdra-webhook-tls"

VALIDATE_PATH = "/validate"
MUTATE_PODS_PATH = "/mutate-pods"
CONVERT_PATH = "/convert"
HEALTHZ_PATH = "/healthz"
CRD_NAMES = tuple(f"{plural}.{GROUP}" for plural in (
    "resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices"))
"""The CRDs whose versions the operator's ``/convert`` webhook converts."""

MUTATE_PODS_WEBHOOK = f"mutate-pods.{GROUP}"
NOTICE_PODS_WEBHOOK = f"notice-pods.{GROUP}"
VALIDATE_PODS_WEBHOOK = f"validate-pods.{GROUP}"
PROTECT_PODS_WEBHOOK = f"protect-pods.{GROUP}"
VALIDATE_WEBHOOK = f"validate.{GROUP}"
VALIDATE_BINDINGS_WEBHOOK = f"validate-bindings.{GROUP}"
VALIDATE_CLAIM_STATUS_WEBHOOK = f"validate-claim-status.{GROUP}"
OPERATOR_SERVICE_ACCOUNT = "kdra-operator"


def _has(obj: str, key: str) -> str:
    return f"(has({obj}.metadata.annotations) && '{key}' in {obj}.metadata.annotations)"


POD_MATCH_CONDITION = (
    f"has(object.metadata.annotations) && '{CLAIMS_ANNOTATION}' in object.metadata.annotations"
)
"""A pod carrying the claims annotation."""

_EXTENDED_NAME = "(k.contains('/') && !k.contains('kubernetes.io/') && !k.startsWith('requests.'))"
_EXTENDED_IN = (f"(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, "
                f"{_EXTENDED_NAME})) || (has(c.resources.requests) && "
                f"c.resources.requests.exists(k, {_EXTENDED_NAME}))))")
EXTENDED_RESOURCES_CONDITION = (
    f"object.spec.containers.exists(c, {_EXTENDED_IN}) || (has(object.spec.initContainers) && "
    f"object.spec.initContainers.exists(c, {_EXTENDED_IN}))"
)
"""A pod whose containers ask for an extended resource (upstream's IsExtendedResourceName:
``<domain>/<name>`` outside ``kubernetes.io``), which a DeviceClass may serve
(:mod:`kdra.operator.core.extended`)."""
MUTATE_POD_CONDITION = f"({POD_MATCH_CONDITION}) || ({EXTENDED_RESOURCES_CONDITION})"
"""The mutating webhook's condition: the claims annotation, or an extended resource."""

_CLAIMS_UPDATED = (
    f"{_has('object', CLAIMS_ANNOTATION)} != {_has('oldObject', CLAIMS_ANNOTATION)} || "
    f"({_has('object', CLAIMS_ANNOTATION)} && object.metadata.annotations['{CLAIMS_ANNOTATION}']"
    f" != oldObject.metadata.annotations['{CLAIMS_ANNOTATION}'])"
)
CLAIMS_CHANGED_CONDITION = (
    f"request.operation == 'CREATE' ? {_has('object', CLAIMS_ANNOTATION)} : "
    f"({_CLAIMS_UPDATED})"
)
"""A creation with the claims annotation, or an update that adds, changes or removes it."""

KDRA_POD_CONDITION = (
    f"{_has('object', CLAIMS_ANNOTATION)} || (has(object.spec.schedulerName) && "
    f"object.spec.schedulerName == '{SCHEDULER_NAME}')"
)
"""A pod kdra serves: the claims annotation, or kdra-scheduler as its scheduler."""
VALIDATE_POD_CONDITION = (
    "(has(request.subResource) && request.subResource == 'ephemeralcontainers') || "
    f"request.operation == 'CREATE' ? ({KDRA_POD_CONDITION}) : ({_CLAIMS_UPDATED})"
)
"""``validate-pods``: a kdra pod created or given ephemeral containers, or an update that
adds, changes or removes the claims annotation."""

_OWNED = (f"(k == '{CLAIM_STATUSES_ANNOTATION}' || k.startsWith('{DEVICES_ANNOTATION_PREFIX}') "
          f"|| k.startsWith('{GPU_UUIDS_ANNOTATION_PREFIX}'))")
_TOLERANCE = (f"(k == '{NRI_TOLERATE_ANNOTATION}' || "
              f"k.startsWith('{NRI_TOLERATE_ANNOTATION}/'))")


def _keys_written(keys: str) -> str:
    """A creation carrying an annotation key ``keys`` (a CEL test of ``k``) holds, or an
    update that adds, changes or removes one."""
    return (
        f"request.operation == 'CREATE' ? (has(object.metadata.annotations) && "
        f"object.metadata.annotations.exists(k, {keys})) : "
        f"((has(object.metadata.annotations) && object.metadata.annotations.exists(k, {keys} && "
        "(!has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || "
        "oldObject.metadata.annotations[k] != object.metadata.annotations[k]))) || "
        f"(has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, {keys}"
        " && (!has(object.metadata.annotations) || !(k in object.metadata.annotations)))))"
    )


OWNED_KEYS_CHANGED_CONDITION = _keys_written(_OWNED)
"""A creation carrying a kdra-owned key, or an update that adds, changes or removes one."""


def protected_keys_condition(namespace: str) -> str:
    """``protect-pods``: a kdra-owned key written (:data:`OWNED_KEYS_CHANGED_CONDITION`), or
    the NRI tolerance (:data:`~kdra.kube.core.podclaims.NRI_TOLERATE_ANNOTATION`) written in
    a namespace other than kdra's own (where kdra's agent and operator pods carry it)."""
    return (f"({OWNED_KEYS_CHANGED_CONDITION}) || (request.namespace != '{namespace}' && "
            f"({_keys_written(_TOLERANCE)}))")


NATIVE_SCHEDULER_CONDITION = (
    "has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0 && "
    "(!has(object.spec.schedulerName) || object.spec.schedulerName == '' || "
    "object.spec.schedulerName == 'default-scheduler')"
)
"""Native flavour, ``mutate-pods``: a pod with claims that asks for no scheduler of its own."""
NATIVE_FOREIGN_CLAIM_CONDITION = (
    "has(object.spec.resourceClaims) && "
    "object.spec.resourceClaims.exists(c, has(c.resourceClaimName))"
)
"""Native flavour, ``validate-claim-pods``: a pod naming a claim (not a template): it may name
a claim generated for another pod, which serves only that pod (upstream's IsForPod)."""
SCHEDULER_FOR_CLAIMS = ("all", "namespaces", "none")
"""The operator's ``--scheduler-for-claims``: which native pods with claims the mutating
webhook gives ``schedulerName: kdra-scheduler``."""
SCHEDULER_LABEL = f"{GROUP}/scheduler"
"""Namespace label (value ``kdra-scheduler``) that makes kdra-scheduler the default for pods
with claims in that namespace (``--scheduler-for-claims=namespaces``, the default)."""
VALIDATE_CLAIM_PODS_WEBHOOK = f"validate-claim-pods.{GROUP}"
ADVISE_WEBHOOK = f"advise-dra-objects.{GROUP}"
"""Native flavour: warnings (never a denial) on built-in claims, templates and classes that
kdra-scheduler could not serve as written (:func:`kdra.operator.core.admission_objects.
upstream_object_warnings`)."""


def trusted_usernames(namespace: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The usernames whose pod writes are kdra's own: the operator's ServiceAccount in
    ``namespace`` (as the manifests deploy it), plus ``extra``; sorted, without repeats."""
    return tuple(sorted({f"system:serviceaccount:{namespace}:{OPERATOR_SERVICE_ACCOUNT}",
                         *extra}))


def _not_trusted(users: Sequence[str]) -> str:
    listed = ", ".join(json.dumps(u, ensure_ascii=False) for u in users)
    return f"!(request.userInfo.username in [{listed}])"
DEVICE_STATUSES_CHANGED_CONDITION = "object.?status.?devices != oldObject.?status.?devices"
"""A claim status update that adds, changes or removes a device status."""
SPEC_CHANGED_CONDITION = (
    "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || "
    "object.spec != oldObject.spec"
)
TIMEOUT_SECONDS = 5
LABELS = {"app.kubernetes.io/name": "kdra", "app.kubernetes.io/component": "webhook"}


@dataclass(frozen=True)
class Endpoint:
    """Where the API server calls the webhooks: ``url`` (a base URL such as
    ``https://127.0.0.1:8443``) when set, else the Service ``name`` in ``namespace``."""

    namespace: str = "kdra-system"
    url: str | None = None
    name: str = SERVICE_NAME
    port: int = SERVICE_PORT

    def client_config(self, path: str, ca_bundle: bytes | None) -> dict[str, Any]:
        config: dict[str, Any]
        if self.url:
            config = {"url": self.url.rstrip("/") + path}
        else:
            config = {"service": {"namespace": self.namespace, "name": self.name,
                                  "path": path, "port": self.port}}
        if ca_bundle:
            config["caBundle"] = base64.b64encode(ca_bundle).decode()
        return config


def service_dns_names(namespace: str, name: str = SERVICE_NAME) -> tuple[str, ...]:
    """The names the API server may use for the Service (the serving certificate's SANs)."""
    return (name, f"{name}.{namespace}", f"{name}.{namespace}.svc",
            f"{name}.{namespace}.svc.cluster.local")


def _pod_rules(*operations: str, subresources: Sequence[str] = ()) -> list[dict[str, Any]]:
    return [{"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations),
             "resources": ["pods", *(f"pods/{s}" for s in subresources)],
             "scope": "Namespaced"}]


def _webhook(name: str, endpoint: Endpoint, path: str, ca_bundle: bytes | None,
             rules: list[dict[str, Any]], conditions: Sequence[tuple[str, str]],
             namespace_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """One webhook of kdra's configurations: the settings they all share (module doc)."""
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": endpoint.client_config(path, ca_bundle),
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "rules": rules,
        "namespaceSelector": namespace_selector or {},
        "objectSelector": {},
        "matchConditions": [{"name": n, "expression": e} for n, e in conditions],
    }


def _pod_webhook(name: str, endpoint: Endpoint, path: str, ca_bundle: bytes | None,
                 operations: Sequence[str] = ("CREATE",),
                 conditions: Sequence[tuple[str, str]] = (
                     ("has-claims-annotation", POD_MATCH_CONDITION),),
                 subresources: Sequence[str] = ()) -> dict[str, Any]:
    return _webhook(name, endpoint, path, ca_bundle,
                    _pod_rules(*operations, subresources=subresources), conditions,
                    {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                           "operator": "NotIn", "values": ["kube-system"]}]})


def operator_username(namespace: str) -> str:
    """The user name kdra's operator has in requests: its service account's."""
    return f"system:serviceaccount:{namespace}:{OPERATOR_SERVICE_ACCOUNT}"


def _binding_webhook(endpoint: Endpoint, ca_bundle: bytes | None) -> dict[str, Any]:
    """The operator's own bindings and evictions, checked by its own webhook
    (kdra.operator.core.bindings): only the kdra-operator service account's are sent, so no other
    binding or eviction in the cluster waits for kdra or fails while it is down."""
    username = operator_username(endpoint.namespace)
    return _webhook(VALIDATE_BINDINGS_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
                    [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                      "resources": ["pods/binding", "pods/eviction"], "scope": "Namespaced"}],
                    [("is-kdra-operator", f"request.userInfo.username == '{username}'")])


def _claim_status_webhook(endpoint: Endpoint, ca_bundle: bytes | None,
                          users: Sequence[str]) -> dict[str, Any]:
    """Drivers' writes of a claim's device statuses (node agents': anyone's but kdra's own
    ``users``), when ``status.devices`` changes: their ``data`` bounded in depth and size
    (kdra.operator.core.admission_objects.device_status_errors), which neither the CRD schema nor a
    ValidatingAdmissionPolicy can measure."""
    return _webhook(VALIDATE_CLAIM_STATUS_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
                    [{"apiGroups": [GROUP], "apiVersions": [VERSION], "operations": ["UPDATE"],
                      "resources": ["resourceclaims/status"], "scope": "Namespaced"}],
                    [("not-kdra", _not_trusted(users)),
                     ("device-statuses-changed", DEVICE_STATUSES_CHANGED_CONDITION)])


def mutating_configuration(endpoint: Endpoint, ca_bundle: bytes | None,
                           flavour: Flavour = KDRA,
                           scheduler_for_claims: str = "namespaces") -> dict[str, Any]:
    """``kdra-mutating``. kdra flavour: pods with the claims annotation get schedulerName and
    env; pods with extended resources a DeviceClass serves get their claim entry first; other
    pods whose claims kdra would not see (``spec.resourceClaims``, a mistyped kdra annotation
    key: :mod:`kdra.operator.core.pod_notices`) get warnings from a webhook that changes
    nothing and fails open. Native flavour: pods with ``spec.resourceClaims`` and no
    scheduler of their own get ``schedulerName: kdra-scheduler`` — every such pod
    (``scheduler_for_claims`` ``all``), those in namespaces labelled :data:`SCHEDULER_LABEL`
    ``=kdra-scheduler`` (``namespaces``), or none (``none``: the configuration has no
    webhook); the kubelet gives containers their devices, so there is no env to inject (and
    the operator's events say what the notices would: kdra.operator.notices)."""
    webhooks: list[dict[str, Any]] = []
    if flavour.device_annotations:
        webhook = _pod_webhook(MUTATE_PODS_WEBHOOK, endpoint, MUTATE_PODS_PATH, ca_bundle,
                               conditions=(("claims-or-extended-resources",
                                            MUTATE_POD_CONDITION),))
        # Another webhook may add containers after kdra's ran; run again so they get env too.
        webhook["reinvocationPolicy"] = "IfNeeded"
        notice = _pod_webhook(NOTICE_PODS_WEBHOOK, endpoint, MUTATE_PODS_PATH, ca_bundle,
                              conditions=(("not-served-by-mutate-pods",
                                           f"!({MUTATE_POD_CONDITION})"),
                                          ("claims-kdra-would-not-see", NOTICE_POD_CONDITION)))
        notice["failurePolicy"] = "Ignore"  # it only warns: an outage must not block these pods
        notice["reinvocationPolicy"] = "Never"
        webhooks += [webhook, notice]
    elif scheduler_for_claims != "none":
        if scheduler_for_claims not in SCHEDULER_FOR_CLAIMS:
            raise ValueError(f"scheduler for claims {scheduler_for_claims!r} "
                             "(--scheduler-for-claims) is not one of "
                             f"{', '.join(SCHEDULER_FOR_CLAIMS)}")
        webhook = _pod_webhook(MUTATE_PODS_WEBHOOK, endpoint, MUTATE_PODS_PATH, ca_bundle,
                               conditions=(("claims-without-scheduler",
                                            NATIVE_SCHEDULER_CONDITION),))
        if scheduler_for_claims == "namespaces":
            webhook["namespaceSelector"]["matchLabels"] = {SCHEDULER_LABEL: SCHEDULER_NAME}
        webhook["reinvocationPolicy"] = "Never"
        webhooks.append(webhook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING_CONFIG, "labels": dict(LABELS)},
        "webhooks": webhooks,
    }


def validating_configuration(endpoint: Endpoint, ca_bundle: bytes | None,
                             trusted: Sequence[str] | None = None,
                             flavour: Flavour = KDRA) -> dict[str, Any]:
    """``kdra-validating``: pods whose claims annotation is created or changed, pods whose
    kdra-owned keys anyone but ``trusted`` (default: :func:`trusted_usernames` of the
    endpoint's namespace) writes, and kdra's claims, templates and classes (claims' and
    templates' specs are immutable, so only their creation is sent); the operator's own
    pod bindings (only pods with schedulerName kdra-scheduler) and evictions (only pods with
    claims); and drivers' device statuses in claims (their data bounded).

    Native flavour: instead of kdra's kinds (upstream's API server validates its own —
    selectors compile, their cost, every limit — and a stricter check of kdra's would refuse
    claims kube-scheduler serves) and their device statuses, the creation of pods naming a
    claim (``validate-claim-pods``: not one generated for another pod), and the built-in
    claims, templates and classes others than kdra write, answered with warnings only
    (``advise-dra-objects``, failing open: what kdra-scheduler could not serve)."""
    users = tuple(trusted) if trusted is not None else trusted_usernames(endpoint.namespace)
    objects = _webhook(
        VALIDATE_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
        [{"apiGroups": [GROUP], "apiVersions": [VERSION], "operations": ["CREATE"],
          "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"},
         {"apiGroups": [GROUP], "apiVersions": [VERSION], "operations": ["CREATE", "UPDATE"],
          "resources": ["deviceclasses"], "scope": "Cluster"}],
        [("spec-changed", SPEC_CHANGED_CONDITION)])
    pods = [
        _pod_webhook(VALIDATE_PODS_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
                     ("CREATE", "UPDATE"),
                     (("kdra-pod-or-claims-annotation-set", VALIDATE_POD_CONDITION),),
                     subresources=("ephemeralcontainers",)),
        _pod_webhook(PROTECT_PODS_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
                     ("CREATE", "UPDATE"),
                     (("not-kdra", _not_trusted(users)),
                      ("kdra-owned-keys-written",
                       protected_keys_condition(endpoint.namespace)))),
    ]
    if flavour.group == GROUP:
        kinds = [objects, _binding_webhook(endpoint, ca_bundle),
                 _claim_status_webhook(endpoint, ca_bundle, users)]
    else:
        # Built-in claims, templates and classes: warnings only, so the webhook fails open;
        # kdra's own writes (the claims it generates from templates) are not sent.
        advise = _webhook(
            ADVISE_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
            [{"apiGroups": [flavour.group], "apiVersions": [flavour.version],
              "operations": ["CREATE"], "resources": ["resourceclaims", "resourceclaimtemplates"],
              "scope": "Namespaced"},
             {"apiGroups": [flavour.group], "apiVersions": [flavour.version],
              "operations": ["CREATE", "UPDATE"], "resources": ["deviceclasses"],
              "scope": "Cluster"}],
            [("spec-changed", SPEC_CHANGED_CONDITION), ("not-kdra", _not_trusted(users))])
        advise["failurePolicy"] = "Ignore"
        kinds = [_pod_webhook(VALIDATE_CLAIM_PODS_WEBHOOK, endpoint, VALIDATE_PATH, ca_bundle,
                              conditions=(("names-a-claim", NATIVE_FOREIGN_CLAIM_CONDITION),)),
                 _binding_webhook(endpoint, ca_bundle), advise]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_CONFIG, "labels": dict(LABELS)},
        "webhooks": [*pods, *kinds],
    }


def conversion(endpoint: Endpoint, ca_bundle: bytes | None) -> dict[str, Any]:
    """A CRD's ``spec.conversion``: the webhook at ``/convert``, ConversionReview v1."""
    return {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": endpoint.client_config(CONVERT_PATH, ca_bundle)}}


def conversion_patch(endpoint: Endpoint, ca_bundle: bytes | None) -> dict[str, Any]:
    """The merge patch that points a CRD's conversion at ``endpoint`` (clearing the other
    kind of client config, since a merge patch would otherwise keep both)."""
    desired = conversion(endpoint, ca_bundle)
    client_config = desired["webhook"]["clientConfig"]
    client_config.setdefault("url", None)
    client_config.setdefault("service", None)
    return {"spec": {"conversion": desired}}


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` (an object as the API server returns it) already holds everything
    ``desired`` sets: the defaults the API server adds do not count as differences."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and contains(live[key], value) for key, value in desired.items())
    if isinstance(desired, list):
        return (isinstance(live, list) and len(live) == len(desired)
                and all(contains(a, b) for a, b in zip(live, desired, strict=True)))
    return bool(live == desired)
