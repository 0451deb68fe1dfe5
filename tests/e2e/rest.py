"""The tests' own synchronous API client: raw JSON requests on pykube-ng's HTTP client (the
kubeconfig's credentials), for what a test does beside kdra — fake kubelets, hostile writers,
creates whose refusal a test reads — independent of kdra's clients under test
(``kdra.kube.client``, ``kdra.kube.reader``).

Invariants:
- An answer outside 2xx is an :class:`ApiError` carrying the status, the reason and the body
  as the API server sent it (a ``Status`` document, for the test to read).
- Paths are the API server's (``/api/v1/namespaces/ns/pods``); nothing is retried.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pykube

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """An answer with an error status: ``status``, ``reason``, ``body`` (the raw text)."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"{status} {reason}: {body[:300]}")
        self.status = status
        self.reason = reason
        self.body = body


class Rest:
    """Requests to the API server as the kubeconfig's user."""

    def __init__(self, kubeconfig: Path | str, timeout: float = 30.0) -> None:
        self.http = pykube.HTTPClient(pykube.KubeConfig.from_file(str(kubeconfig)),
                                      timeout=timeout)
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json",
                params: dict[str, Any] | None = None) -> JSON:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        response = self.http.session.request(method, self.http.url + path, data=data,
                                             headers=headers, params=params,
                                             timeout=self.timeout)
        if not 200 <= response.status_code < 300:
            raise ApiError(response.status_code, str(response.reason or ""), response.text)
        found: JSON = response.json() if response.content else {}
        return found

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def list(self, path: str, **params: Any) -> list[JSON]:
        return list(self.request("GET", path, params=params or None).get("items") or [])

    def patch(self, path: str, patch: JSON, *, content_type: str = MERGE_PATCH) -> JSON:
        return self.request("PATCH", path, patch, content_type=content_type)

    def delete(self, path: str, **params: Any) -> JSON:
        return self.request("DELETE", path, params=params or None)

    def close(self) -> None:
        self.http.session.close()
