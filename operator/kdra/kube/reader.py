"""The command-line tools' reads (``kubectl kdra``, ``kdra describe``, ``kdra check``): one
synchronous client, with the user's own kubeconfig (pykube-ng).

A command-line tool runs as the user, once, and reads a few lists: pykube-ng fits that job —
client certificates and tokens on plain ``requests`` calls — without an event loop or
generated API classes. The kubeconfig is merged by :func:`kdra.kube.kubeconfig.merged` and its
token file or exec plugin resolved once by :func:`kdra.kube.credentials.static_credentials`,
as the async client reads them. Items come back as plain dicts (the API's JSON), which the
CLI's pure views (``kdra.cli.core``) take.

Invariants:
- Read-only: only GETs (LIST and GET), paginated 500 items a page.
- An item of a list that cannot be decoded (nested deeper than the decoder's limit) is left
  out and described in the caller's ``unreadable`` list
  (:func:`kdra.kube.core.jsonscan.decode_list`); a list document that cannot be decoded at
  all, or a GET's answer, is a :class:`ClusterError` — never a decoder's exception.
- A kind the user may not read is an :class:`Unreadable` naming the kind, the scope and the
  API server's answer (403 Forbidden, or 404 when kdra's CRDs are not installed); callers
  show the rest and say what is missing. An unreachable API server or a kubeconfig that
  cannot be used is a :class:`ClusterError`.
- ``KUBECONFIG`` with several files is merged as kubectl does (first definition of a name
  wins; relative file paths resolve against the file that names them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from kdra import GROUP, VERSION
from kdra.kube.core.flavours import NATIVE, Flavour, flavour_named, read_flavour
from kdra.kube.core.jsonscan import ScanError, decode_list
from kdra.kube.credentials import static_credentials
from kdra.kube.kubeconfig import ConfigError, kubeconfig_paths, merged

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
CONFIGMAPS = Kind("ConfigMaps", "v1", "configmaps", True)
SECRETS = Kind("Secrets", "v1", "secrets", True)
SERVICEACCOUNTS = Kind("ServiceAccounts", "v1", "serviceaccounts", True)
LEASES = Kind("Leases", "coordination.k8s.io/v1", "leases", True)
CLAIMS = Kind("ResourceClaims", f"{GROUP}/{VERSION}", "resourceclaims", True)
SLICES = Kind("ResourceSlices", f"{GROUP}/{VERSION}", "resourceslices", False)
CLASSES = Kind("DeviceClasses", f"{GROUP}/{VERSION}", "deviceclasses", False)
TEMPLATES = Kind("ResourceClaimTemplates", f"{GROUP}/{VERSION}", "resourceclaimtemplates", True)
QUOTAS = Kind("DeviceQuotas", f"{GROUP}/v1alpha1", "devicequotas", True)


@dataclass(frozen=True)
class DraKinds:
    """The four DRA kinds where one API flavour has them."""

    claims: Kind
    slices: Kind
    classes: Kind
    templates: Kind

    @classmethod
    def of(cls, flavour: Flavour) -> DraKinds:
        return cls(*(Kind(name, r.api_version, r.plural, r.namespaced) for name, r in (
            ("ResourceClaims", flavour.claims), ("ResourceSlices", flavour.slices),
            ("DeviceClasses", flavour.classes), ("ResourceClaimTemplates", flavour.templates))))


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


def _config(kubeconfig: str | None, context: str | None) -> Any:
    import pykube

    existing = [p for p in kubeconfig_paths(kubeconfig) if p.is_file()]
    try:
        if existing:
            doc = merged(existing)
            if context:
                names = sorted(str(c.get("name")) for c in doc["contexts"])
                if context not in names:
                    raise ClusterError(f"context {context!r} not found in the kubeconfig "
                                       f"(contexts: {', '.join(names) or 'none'})")
            # a token file read and an exec plugin run once, by kdra (any exec API version,
            # bounded), as the async client does: pykube-ng would run the plugin per request
            static_credentials(doc, context, os.pathsep.join(map(str, existing)))
            config = pykube.KubeConfig(doc)
        elif kubeconfig:
            raise ClusterError(f"kubeconfig {kubeconfig} not found")
        else:
            config = pykube.KubeConfig.from_service_account()
        if context:
            config.set_current_context(context)
        config.cluster  # noqa: B018 - resolve the context now: a clear error, not a KeyError
    except ClusterError:
        raise
    except ConfigError as exc:
        raise ClusterError(str(exc)) from exc
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

    def list(self, kind: Kind, namespace: str | None = None, *,
             label_selector: str | None = None,
             unreadable: list[str] | None = None) -> list[JSON]:
        """Every item of ``kind`` (in ``namespace``; None: all namespaces; with
        ``label_selector``). Items that cannot be decoded are left out and described
        (``namespace/name (resourceVersion v): why``) in ``unreadable`` when given."""
        scope = f"in namespace {namespace}" if namespace else (
            "in all namespaces" if kind.namespaced else "(cluster-wide)")
        items: list[JSON] = []
        token: str | None = None
        while True:
            params: JSON = {"limit": PAGE}
            if label_selector:
                params["labelSelector"] = label_selector
            if token:
                params["continue"] = token
            response = self._get(kind, kind.plural, namespace if kind.namespaced else None,
                                 params)
            if response.status_code != 200:
                raise Unreadable(kind, scope, response.status_code, _message(response))
            try:
                meta, decoded, bad = decode_list(response.content)
            except ScanError as exc:
                raise ClusterError(f"the list of {kind.name} {scope} cannot be decoded: "
                                   f"{exc}") from exc
            items.extend(item for item in decoded if isinstance(item, dict))
            if unreadable is not None:
                unreadable.extend(
                    f"{u.namespace + '/' if u.namespace else ''}{u.name or '<unnamed>'} "
                    f"(resourceVersion {u.resource_version}): {u.reason}" for u in bad)
            token = meta.get("continue")
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
        return _document(response, f"{kind.name} {name!r}")

    def flavour(self, setting: str = "auto") -> Flavour:
        """The API flavour to read: ``setting`` (native, kdra), or for ``auto`` the one the
        cluster has (:func:`kdra.kube.core.flavours.read_flavour`: one slice of each kind's
        asked for; a kind this user may not list counts as served, without slices)."""
        if setting not in ("", "auto"):
            return flavour_named(setting)

        def probe(kind: Kind) -> tuple[bool, bool]:
            response = self._get(kind, kind.plural, None, {"limit": 1})
            if response.status_code == 404:
                return False, False
            if response.status_code != 200:
                return True, False
            return True, bool(_document(response, kind.name).get("items"))

        native_served, _ = probe(DraKinds.of(NATIVE).slices)
        kdra_served, kdra_slices = probe(SLICES)
        return read_flavour(native_served=native_served, kdra_served=kdra_served,
                            kdra_slices=kdra_slices)

    def close(self) -> None:
        self.api.session.close()


def _document(response: Any, what: str) -> JSON:
    """An answer's JSON object; a :class:`ClusterError` when it is not one."""
    try:
        found = orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise ClusterError(f"the answer for {what} cannot be decoded: {exc}") from exc
    if not isinstance(found, dict):
        raise ClusterError(f"the answer for {what} is not a JSON object")
    return found


def _message(response: Any) -> str:
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return (response.text or response.reason or "").strip()[:300]
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or response.reason or "")[:300]
