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
              unreadable: list[str] | None = None) -> list[JSON]:
    """Every object of one of kdra's kinds (``resourceclaims``, ``resourceslices``...), of
    ``namespace`` or of all namespaces."""
    custom = kubernetes.client.CustomObjectsApi(api)
    if namespace:
        return list_all(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, plural,
                        unreadable=unreadable)
    return list_all(custom.list_cluster_custom_object, GROUP, VERSION, plural,
                    unreadable=unreadable)


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
