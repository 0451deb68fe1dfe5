"""Reading the cluster for kdra's command-line tools (``kdra describe``, ``kdra check``).

They use the official ``kubernetes`` client synchronously: a CLI reads a few lists once, so an
event loop buys nothing. Items come back as plain dicts (the API's JSON), which the pure views
in ``kdra.domain`` take. An item that cannot be decoded (nested deeper than the decoder's
limit) is left out of the list and reported to the caller's ``unreadable`` list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kdra.kube.core.jsonscan import ScanError, decode_list

JSON = dict[str, Any]


class UnreadableList(Exception):
    """A LIST answer that is not a JSON list document at all."""


def api_client(kubeconfig: str | None, context: str | None = None) -> Any:
    """The official client from ``kubeconfig`` (else ``$KUBECONFIG``/``~/.kube/config``) and
    its ``context`` (default: the current one), falling back to the in-cluster service
    account."""
    import kubernetes

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
