"""The API client every kdra service uses: async, raw JSON, typed errors.

Built on ``kubernetes_asyncio`` (kubeconfig and in-cluster credentials, token refresh, TLS),
but talking JSON dicts through its REST layer instead of generated models: the hot path parses
each object once, into kdra's own models, and never pays for a second model layer.

Invariants:
- This package is the only one that talks to the API server (import-linter enforces it).
- A failed call raises :class:`ApiError` or one of its subclasses — :class:`NotFound`,
  :class:`Conflict` (409: a resourceVersion precondition failed, or the object exists),
  :class:`Invalid` (422: the server's validation rejected the object; ``message`` names the
  field) — never a transport-specific exception, except for connection errors (``OSError``/
  ``aiohttp.ClientError``), which callers treat as "retry later".
- Writes that decide ownership of a device carry ``metadata.resourceVersion`` (``replace_status``
  sends the whole object; the server rejects a stale one with :class:`Conflict`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from kdra import GROUP, VERSION

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CLAIMS = Resource(GROUP, VERSION, "resourceclaims", True, "ResourceClaim")
TEMPLATES = Resource(GROUP, VERSION, "resourceclaimtemplates", True, "ResourceClaimTemplate")
CLASSES = Resource(GROUP, VERSION, "deviceclasses", False, "DeviceClass")
SLICES = Resource(GROUP, VERSION, "resourceslices", False, "ResourceSlice")
PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str, body: JSON | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        super().__init__(f"{status} {reason}: {message}")


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiError):
    """409: a resourceVersion/uid precondition failed, or the object already exists."""

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class Invalid(ApiError):
    """422: the server's validation rejected the object; ``message`` names the field."""


class Forbidden(ApiError):
    """403: RBAC, an admission policy or a webhook refused the request."""


_ERRORS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 422: Invalid, 403: Forbidden}


class KubeClient:
    """Async access to the API server with raw JSON bodies.

    Create with :func:`connect`; close with :meth:`close` (or ``async with``).
    """

    def __init__(self, api: k8s_client.ApiClient) -> None:
        self._api = api

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._api.close()

    async def request(self, method: str, path: str, *, body: Any = None,
                      query: dict[str, Any] | None = None,
                      content_type: str = "application/json") -> JSON:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        response = await self._api.call_api(
            path, method, query_params=params, header_params=headers, body=body,
            auth_settings=["BearerToken"], _preload_content=False,
        )
        try:
            raw = await response.read()
        finally:
            response.release()
        data: JSON = json.loads(raw) if raw else {}
        if 200 <= response.status < 300:
            return data
        error = _ERRORS.get(response.status, ApiError)
        raise error(response.status, str(data.get("reason", response.reason)),
                    str(data.get("message", raw[:500])), data)

    # ------------------------------------------------------------------ verbs

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name))

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None) -> list[JSON]:
        items: list[JSON] = []
        token: str | None = None
        while True:
            page = await self.request("GET", res.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": 500, "continue": token})
            items.extend(page.get("items", []))
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return await self.request("POST", res.path(namespace), body=body)

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, subresource: str | None = None,
                    content_type: str = MERGE_PATCH) -> JSON:
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                  content_type=content_type)

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None) -> JSON:
        """PUT the whole object; its ``metadata.resourceVersion`` is the precondition."""
        meta = body["metadata"]
        return await self.request(
            "PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body)

    async def replace_status(self, res: Resource, body: JSON) -> JSON:
        return await self.replace(res, body, subresource="status")

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, resource_version: str | None = None,
                     propagation: str | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v}
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        return await self.request("DELETE", res.path(namespace, name), body=options)

    async def bind(self, namespace: str, pod: str, uid: str, node: str) -> JSON:
        """Bind a pod to a node through the ``pods/binding`` subresource."""
        return await self.request("POST", PODS.path(namespace, pod, "binding"), body={
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        })


async def connect(kubeconfig: str | None = None) -> KubeClient:
    """A client from ``kubeconfig`` (path), else ``$KUBECONFIG``/``~/.kube/config``, else the
    in-cluster service account."""
    configuration = k8s_client.Configuration()
    try:
        await k8s_config.load_kube_config(config_file=kubeconfig,
                                          client_configuration=configuration)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig:
            raise
        k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 64
    return KubeClient(k8s_client.ApiClient(configuration))
