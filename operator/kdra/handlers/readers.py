"""Reading the cluster for kdra's command-line tools (``kdra describe``, ``kdra check``).

They use the official ``kubernetes`` client synchronously: a CLI reads a few lists once, so an
event loop buys nothing. Items come back as plain dicts (the API's JSON), which the pure views
in ``kdra.domain`` take.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]


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


def list_all(call: Callable[..., Any], *args: str, **kwargs: Any) -> list[JSON]:
    """Every item of a LIST, 500 a page, as plain dicts."""
    items: list[JSON] = []
    token: str | None = None
    while True:
        page_args: dict[str, Any] = {"limit": 500, "_preload_content": False, **kwargs}
        if token:
            page_args["_continue"] = token
        page = json.loads(call(*args, **page_args).data)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
