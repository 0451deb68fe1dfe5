"""Reading the cluster for kdra's command-line tools (``kdra describe``, ``kdra check``).

They use the official ``kubernetes`` client synchronously: a CLI reads a few lists once, so an
event loop buys nothing. Items come back as plain dicts (the API's JSON), which the CLI's pure
views (``kdra.cli.core``) take. An item that cannot be decoded (nested deeper than the
decoder's limit) is left out of the list and reported to the caller's ``unreadable`` list.

Invariants:
- The only module of the command-line tools that imports ``kubernetes``: the CLI catches
  :data:`ApiException` and :data:`TransportError` from here.
- Every LIST is paged (500 items a page); what a LIST or GET returns is decoded without the
  client's models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import kubernetes
import urllib3

from kdra import GROUP, VERSION
from kdra.kube.core.flavours import NATIVE, Flavour, flavour_named, read_flavour
from kdra.kube.core.jsonscan import ScanError, decode_list

JSON = dict[str, Any]

ApiException = kubernetes.client.exceptions.ApiException
"""What an error answer of the API server raises (``status``, ``reason``, ``body``)."""

TransportError = urllib3.exceptions.HTTPError
"""What a connection to the API server that fails raises."""


class UnreadableList(Exception):
    """A LIST answer that is not a JSON list document at all."""


def api_client(kubeconfig: str | None, context: str | None = None) -> Any:
    """The official client from ``kubeconfig`` (else ``$KUBECONFIG``/``~/.kube/config``) and
    its ``context`` (default: the current one), falling back to the in-cluster service
    account."""
    try:
        return kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context)
    except (kubernetes.config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig or context:
            raise
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
        client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def list_all(call: Callable[..., Any], *args: str, unreadable: list[str] | None = None,
             **kwargs: Any) -> list[JSON]:
    """Every item of a LIST, 500 a page, as plain dicts. Items that cannot be decoded are
    described (``namespace/name: why``) in ``unreadable`` when given, and left out."""
    items: list[JSON] = []
    token: str | None = None
    while True:
        page_args: dict[str, Any] = {"limit": 500, "_preload_content": False, **kwargs}
        if token:
            page_args["_continue"] = token
        try:
            meta, decoded, bad = decode_list(call(*args, **page_args).data)
        except ScanError as exc:
            raise UnreadableList(f"the list cannot be decoded: {exc}") from exc
        items.extend(item for item in decoded if isinstance(item, dict))
        if unreadable is not None:
            unreadable.extend(
                f"{u.namespace + '/' if u.namespace else ''}{u.name or '<unnamed>'} "
                f"(resourceVersion {u.resource_version}): {u.reason}" for u in bad)
        token = meta.get("continue")
        if not token:
            return items


def list_kdra(api: Any, plural: str, namespace: str | None = None, *,
              unreadable: list[str] | None = None, group: str = GROUP) -> list[JSON]:
    """Every object of one of the DRA kinds (``resourceclaims``, ``resourceslices``...) in
    ``group`` (kdra's, or the native flavour's ``resource.k8s.io``), of ``namespace`` or of
    all namespaces."""
    custom = kubernetes.client.CustomObjectsApi(api)
    if namespace:
        return list_all(custom.list_namespaced_custom_object, group, VERSION, namespace, plural,
                        unreadable=unreadable)
    return list_all(custom.list_cluster_custom_object, group, VERSION, plural,
                    unreadable=unreadable)


def flavour(api: Any, setting: str = "auto") -> Flavour:
    """The API flavour to read: ``setting`` (native, kdra), or for ``auto`` the one the
    cluster serves (:func:`kdra.kube.core.flavours.read_flavour`: one slice of each kind
    asked for)."""
    if setting not in ("", "auto"):
        return flavour_named(setting)
    custom = kubernetes.client.CustomObjectsApi(api)

    def served_with_slices(group: str) -> tuple[bool, bool]:
        try:
            answer: Any = custom.list_cluster_custom_object(
                group, VERSION, "resourceslices", limit=1, _preload_content=False)
            page = json.loads(answer.data)
        except ApiException as exc:
            if exc.status == 404:
                return False, False
            return True, False  # served, but not readable here: no evidence of slices
        return True, bool(page.get("items"))

    native_served, _ = served_with_slices(NATIVE.group)
    kdra_served, kdra_slices = served_with_slices(GROUP)
    return read_flavour(native_served=native_served, kdra_served=kdra_served,
                        kdra_slices=kdra_slices)


def read_service_account(api: Any, namespace: str, name: str) -> JSON | None:
    """The ServiceAccount ``namespace/name``, or None when it does not exist."""
    try:
        answer: Any = kubernetes.client.CoreV1Api(api).read_namespaced_service_account(
            name, namespace, _preload_content=False)
        return dict(json.loads(answer.data))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_pods(api: Any, *, unreadable: list[str] | None = None) -> list[JSON]:
    """Every pod of every namespace."""
    return list_all(kubernetes.client.CoreV1Api(api).list_pod_for_all_namespaces,
                    unreadable=unreadable)


def list_nodes(api: Any, *, unreadable: list[str] | None = None) -> list[JSON]:
    """Every node."""
    return list_all(kubernetes.client.CoreV1Api(api).list_node, unreadable=unreadable)


def list_leases(api: Any, namespace: str, *, label_selector: str,
                unreadable: list[str] | None = None) -> list[JSON]:
    """The Leases of ``namespace`` with ``label_selector``."""
    return list_all(kubernetes.client.CoordinationV1Api(api).list_namespaced_lease, namespace,
                    label_selector=label_selector, unreadable=unreadable)


def read_config(api: Any, kind: str, namespace: str, name: str) -> Any:
    """The ConfigMap (``kind`` ``ConfigMap``) or else Secret ``namespace/name``, decoded from
    the API's JSON (a Secret's ``data`` values as the API gives them, base64)."""
    core = kubernetes.client.CoreV1Api(api)
    read: Any = core.read_namespaced_config_map if kind == "ConfigMap" \
        else core.read_namespaced_secret
    return json.loads(read(name, namespace, _preload_content=False).data)
