"""Synchronous reads for ``kubectl kdra``, with the user's own kubeconfig (pykube-ng).

A kubectl plugin runs as the user, once, and reads a few lists: pykube-ng fits that job —
kubeconfig loading with contexts, the usual credentials (client certificates, tokens, exec
plugins of ``client.authentication.k8s.io/v1alpha1``/``v1beta1``, OIDC) and plain
``requests`` calls — without an event loop or generated API classes. Items come back as
plain dicts (the API's JSON), which the CLI's pure views (``kdra.cli.core``) take.

Invariants:
- Read-only: only GETs (LIST and GET), paginated 500 items a page.
- A kind the user may not read is an :class:`Unreadable` naming the kind, the scope and the
  API server's answer (403 Forbidden, or 404 when kdra's CRDs are not installed); callers
  show the rest and say what is missing. An unreachable API server or a kubeconfig that
  cannot be used is a :class:`ClusterError`.
- ``KUBECONFIG`` with several files is merged as kubectl does (first definition of a name
  wins; relative file paths resolve against the file that names them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdra import GROUP, VERSION

JSON = dict[str, Any]
PAGE = 500
TIMEOUT = 30.0


@dataclass(frozen=True)
class Kind:
    name: str
    """How messages call it (``pods``, ``ResourceClaims``)."""
    api_version: str
    plural: str
    namespaced: bool


PODS = Kind("pods", "v1", "pods", True)
NODES = Kind("nodes", "v1", "nodes", False)
CLAIMS = Kind("ResourceClaims", f"{GROUP}/{VERSION}", "resourceclaims", True)
SLICES = Kind("ResourceSlices", f"{GROUP}/{VERSION}", "resourceslices", False)
CLASSES = Kind("DeviceClasses", f"{GROUP}/{VERSION}", "deviceclasses", False)
TEMPLATES = Kind("ResourceClaimTemplates", f"{GROUP}/{VERSION}", "resourceclaimtemplates", True)
QUOTAS = Kind("DeviceQuotas", f"{GROUP}/v1alpha1", "devicequotas", True)


class ClusterError(Exception):
    """The cluster cannot be reached or the kubeconfig cannot be used."""


class Unreadable(Exception):
    """The API server refused to give this kind (or object) to this user."""

    def __init__(self, kind: Kind, scope: str, status: int, message: str) -> None:
        self.kind = kind
        self.scope = scope
        self.status = status
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        answer = {401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not Found"}.get(
            self.status, str(self.status))
        hint = ""
        if self.status == 404 and self.kind.api_version != "v1" and "/" not in self.scope:
            hint = f" (is {self.kind.api_version} served? kdra's CRDs may not be installed)"
        return f"could not read {self.kind.name} {self.scope}: {answer}{hint}: {self.message}"


class NotFound(Exception):
    """A named object does not exist."""


def _merged_kubeconfig(paths: Sequence[Path]) -> JSON:
    """kubectl's merge of several kubeconfig files (first definition wins)."""
    import yaml

    merged: JSON = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ClusterError(f"kubeconfig {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise ClusterError(f"kubeconfig {path}: not a mapping")
        if not merged.get("current-context") and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section, field_names in (("clusters", ("certificate-authority",)),
                                     ("users", ("client-certificate", "client-key"))):
            for entry in doc.get(section) or ():
                inner = entry.get(section[:-1]) or {}
                for name in field_names:
                    value = inner.get(name)
                    if isinstance(value, str) and value and not os.path.isabs(value):
                        inner[name] = str((path.parent / value).resolve())
        for section in ("clusters", "users", "contexts"):
            for entry in doc.get(section) or ():
                name = entry.get("name")
                if name not in seen[section]:
                    seen[section].add(name)
                    merged[section].append(entry)
    return merged


def _config(kubeconfig: str | None, context: str | None) -> Any:
    import pykube

    source = kubeconfig or os.environ.get("KUBECONFIG") or ""
    paths = [Path(p).expanduser() for p in source.split(os.pathsep) if p] if source else [
        Path("~/.kube/config").expanduser()]
    existing = [p for p in paths if p.is_file()]
    try:
        if existing:
            config = pykube.KubeConfig(_merged_kubeconfig(existing))
        elif kubeconfig:
            raise ClusterError(f"kubeconfig {kubeconfig} not found")
        else:
            config = pykube.KubeConfig.from_service_account()
        if context:
            if context not in config.contexts:
                raise ClusterError(f"context {context!r} not found in the kubeconfig "
                                   f"(contexts: {', '.join(sorted(config.contexts)) or 'none'})")
            config.set_current_context(context)
        config.cluster  # noqa: B018 - resolve the context now: a clear error, not a KeyError
    except ClusterError:
        raise
    except (FileNotFoundError, KeyError) as exc:
        raise ClusterError("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a "
                           f"pod: {exc}") from exc
    except pykube.exceptions.PyKubeError as exc:
        raise ClusterError(str(exc)) from exc
    return config


class Reader:
    """Lists and gets as the kubeconfig's user (optionally impersonating ``as_user``)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *,
                 as_user: str | None = None, as_group: str | None = None,
                 timeout: float = TIMEOUT) -> None:
        import pykube

        self.config = _config(kubeconfig, context)
        self.api = pykube.HTTPClient(self.config, timeout=timeout)
        if as_user:  # kubectl's --as / --as-group (one group: headers do not repeat here)
            self.api.session.headers["Impersonate-User"] = as_user
            if as_group:
                self.api.session.headers["Impersonate-Group"] = as_group
        self.requests = 0

    @property
    def namespace(self) -> str:
        """The context's namespace (``default`` when it names none)."""
        return str(self.config.namespace or "default")

    def _get(self, kind: Kind, url: str, namespace: str | None, params: JSON) -> Any:
        import requests

        self.requests += 1
        try:
            return self.api.get(version=kind.api_version, url=url, namespace=namespace,
                                params=params)
        except requests.exceptions.RequestException as exc:
            raise ClusterError(f"cannot reach the API server {self.config.cluster.get('server')}:"
                               f" {exc}") from exc
        except NotImplementedError as exc:  # e.g. an exec plugin speaking a newer API
            raise ClusterError(f"the kubeconfig's credentials are not supported: {exc}") from exc

    def list(self, kind: Kind, namespace: str | None = None) -> list[JSON]:
        """Every item of ``kind`` (in ``namespace``; None: all namespaces)."""
        scope = f"in namespace {namespace}" if namespace else (
            "in all namespaces" if kind.namespaced else "(cluster-wide)")
        items: list[JSON] = []
        token: str | None = None
        while True:
            params: JSON = {"limit": PAGE}
            if token:
                params["continue"] = token
            response = self._get(kind, kind.plural, namespace if kind.namespaced else None,
                                 params)
            if response.status_code != 200:
                raise Unreadable(kind, scope, response.status_code, _message(response))
            page = response.json()
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        """One object; :class:`NotFound` when it does not exist."""
        from urllib.parse import quote

        response = self._get(kind, f"{kind.plural}/{quote(name, safe='')}",
                             namespace if kind.namespaced else None, {})
        if response.status_code == 404:
            raise NotFound(f"{kind.name} {name!r} not found"
                           + (f" in namespace {namespace}" if namespace else ""))
        if response.status_code != 200:
            raise Unreadable(kind, f"{name!r}" + (f" in namespace {namespace}" if namespace
                                                   else ""),
                             response.status_code, _message(response))
        found: JSON = response.json()
        return found

    def close(self) -> None:
        self.api.session.close()


def _message(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return (response.text or response.reason or "").strip()[:300]
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or response.reason or "")[:300]
