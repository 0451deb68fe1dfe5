"""The webhook server's upkeep: its TLS certificate and the webhook configurations.

:class:`~kdra.operator.webhooks.server.WebhookServer` runs these at start-up and every check
interval:

* :func:`fetch_bundle` — the serving certificate: read from ``webhook_cert_dir`` (a supplied
  one; a warning when it does not cover the name the API server calls), or the generated one
  kept in the Secret ``kdra-webhook-tls``, created when missing and rotated when due
  (:mod:`kdra.operator.webhooks.certs`).
* :func:`apply_configurations` — the ``kdra-mutating`` / ``kdra-validating`` configurations
  (:mod:`kdra.operator.core.webhook_configs`) with the bundle's CA, and the four CRDs'
  ``spec.conversion`` (:mod:`kdra.operator.webhooks.conversion`); where only the CA bundle may
  be changed (the ValidatingAdmissionPolicy ``kdra-operator-webhooks``), only it is, with a
  warning that the rest differs from this version's.
* :func:`check_service` — a warning when the configurations name a Service that is missing.

Invariants:
- Replicas share the Secret and the configurations: every write is a create or a
  resourceVersion-checked replace; a loser of a race re-reads and uses (or updates) the
  winner's. Each round gives up after a few conflicts in a row with :class:`WebhookError`.
- A configuration that already contains what this version wants is not written.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import MUTATING_WEBHOOKS, SECRETS, SERVICES, VALIDATING_WEBHOOKS, Resource
from kdra.operator.core.webhook_configs import (
    LABELS,
    SERVICE_NAME,
    TLS_SECRET,
    Endpoint,
    contains,
    mutating_configuration,
    service_dns_names,
    validating_configuration,
)
from kdra.operator.settings import OperatorSettings
from kdra.operator.webhooks import certs
from kdra.operator.webhooks.certs import TlsBundle
from kdra.operator.webhooks.conversion import point_crds

log = logging.getLogger(__name__)

_ATTEMPTS = 3


class WebhookError(Exception):
    """The webhook server cannot get a usable certificate or configuration."""


# ------------------------------------------------------------------ certificates


async def fetch_bundle(settings: OperatorSettings, client: KubeClient | None,
                       hosts: Sequence[str], clock: Callable[[], dt.datetime],
                       current: TlsBundle | None) -> TlsBundle:
    """The certificate to serve: the supplied one (``webhook_cert_dir``), else the Secret's.
    ``hosts``: what a generated certificate must cover; ``current``: the one served now (a
    supplied certificate's coverage warning is logged only when it changes)."""
    if settings.webhook_cert_dir:
        directory = Path(settings.webhook_cert_dir)
        try:
            bundle = await asyncio.to_thread(certs.from_directory, directory)
        except (OSError, ValueError) as exc:
            raise WebhookError(f"webhook_cert_dir {directory}: {exc}") from exc
        # The API server needs the name it calls: the URL's host, or the Service's.
        needed = ({urlparse(settings.webhook_url).hostname or ""}
                  if settings.webhook_url
                  else {service_dns_names(settings.namespace)[2]})
        missing = needed - bundle.hosts
        if missing and bundle != current:
            log.warning("the supplied webhook certificate does not cover %s",
                        ", ".join(sorted(missing)))
        return bundle
    return await _secret_bundle(client, settings.namespace, hosts, clock)


async def _secret_bundle(client: KubeClient | None, namespace: str, hosts: Sequence[str],
                         clock: Callable[[], dt.datetime]) -> TlsBundle:
    """The generated bundle from the Secret: created when missing, rotated when due.
    Concurrent replicas race with create / resourceVersion-checked replace; a loser
    re-reads and uses the winner's."""
    assert client is not None
    hosts = list(hosts)
    for _ in range(_ATTEMPTS):
        now = clock()
        try:
            secret = await client.get(SECRETS, TLS_SECRET, namespace)
        except NotFound:
            bundle = certs.generate(hosts, now)
            try:
                await client.create(SECRETS, _secret(namespace, bundle), namespace)
            except Conflict:
                continue  # another replica created it first
            log.info("generated the webhook CA and certificate in Secret %s/%s",
                     namespace, TLS_SECRET)
            return bundle
        current: TlsBundle | None
        try:
            current = certs.from_secret_data(secret.get("data") or {})
            renewed = certs.renew(current, hosts, now)
        except ValueError as exc:
            log.warning("Secret %s/%s is unusable (%s): replacing it", namespace,
                        TLS_SECRET, exc)
            current, renewed = None, certs.generate(hosts, now)
        if renewed is None and current is not None:
            return current
        assert renewed is not None
        body = {**secret, "data": certs.to_secret_data(renewed)}
        try:
            await client.replace(SECRETS, body)
        except Conflict:
            continue  # another replica rotated it first
        log.info("rotated the webhook certificate in Secret %s/%s (valid until %s)",
                 namespace, TLS_SECRET, renewed.not_after().isoformat())
        return renewed
    raise WebhookError(f"Secret {namespace}/{TLS_SECRET} kept changing while being read")


def _secret(namespace: str, bundle: TlsBundle) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": namespace,
                     "labels": dict(LABELS)},
        "data": certs.to_secret_data(bundle),
    }


# ------------------------------------------------------------------ configurations


async def apply_configurations(client: KubeClient | None, namespace: str, endpoint: Endpoint,
                               bundle: TlsBundle, trusted: Sequence[str],
                               flavour: Flavour = KDRA,
                               scheduler_for_claims: str = "namespaces") -> None:
    """Bring both webhook configurations (the ``flavour``'s) and the CRDs' conversion webhook
    up to date with ``bundle``'s CA (``trusted``: kdra's identities, exempt from the
    validating webhook's owned-key checks)."""
    if not bundle.ca_pem.strip():
        raise WebhookError("no CA bundle for the webhook configurations: put ca.crt in "
                           "webhook_cert_dir, or turn webhook_manage_config off")
    assert client is not None
    for resource, desired in (
        (MUTATING_WEBHOOKS, mutating_configuration(endpoint, bundle.ca_pem, flavour,
                                                   scheduler_for_claims)),
        (VALIDATING_WEBHOOKS, validating_configuration(endpoint, bundle.ca_pem,
                                                       tuple(trusted), flavour)),
    ):
        await _apply(client, resource, desired)
    await point_crds(client, endpoint, bundle.ca_pem, endpoint.url or
                     f"Service {namespace}/{SERVICE_NAME}")


async def _apply(client: KubeClient, resource: Resource, desired: dict[str, Any]) -> None:
    name = desired["metadata"]["name"]
    for _ in range(_ATTEMPTS):
        try:
            live = await client.get(resource, name)
        except NotFound:
            try:
                await client.create(resource, desired)
            except Conflict:
                continue
            log.info("created %s %s", resource.kind, name)
            return
        if contains(live, desired):
            return
        meta = live["metadata"]
        body = {**desired, "metadata": {
            **meta, "labels": {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
        }}
        try:
            await client.replace(resource, body)
        except Conflict:
            continue
        except ApiError as exc:
            if exc.status not in (403, 422):
                raise
            # Not allowed to change more than the CA bundle (kdra-operator-webhooks).
            if not await _update_ca_bundle(client, resource, live, desired, exc):
                continue
            return
        log.info("updated %s %s", resource.kind, name)
        return
    raise WebhookError(f"{resource.kind} {name} kept changing while being updated")


async def _update_ca_bundle(client: KubeClient, resource: Resource, live: dict[str, Any],
                            desired: dict[str, Any], refused: ApiError) -> bool:
    """Put ``desired``'s CA bundle into ``live``, changing nothing else; False on
    Conflict (the caller reads again)."""
    name = live["metadata"]["name"]
    bundles = {w["name"]: w["clientConfig"].get("caBundle")
               for w in desired.get("webhooks") or []}
    body = copy.deepcopy(live)
    for webhook in body.get("webhooks") or []:
        bundle = bundles.get(webhook.get("name"))
        if bundle:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
    differs = not contains(body, desired)
    if body != live:
        try:
            await client.replace(resource, body)
        except Conflict:
            return False
        log.info("updated the CA bundle of %s %s", resource.kind, name)
    if differs:
        log.warning("%s %s differs from this kdra version's beyond the CA bundle, which is all "
                    "this operator may change (%s): re-apply manifests/webhooks",
                    resource.kind, name, refused.message)
    return True


async def check_service(client: KubeClient | None, endpoint: Endpoint, namespace: str) -> None:
    """Warn when the configurations name the webhook Service (no URL) and it is missing."""
    if endpoint.url:
        return
    assert client is not None
    try:
        await client.get(SERVICES, SERVICE_NAME, namespace)
    except NotFound:
        log.warning(
            "the webhook configurations name the Service %s/%s, which does not exist: the "
            "API server will reject pods with the claims annotation and kdra objects "
            "until it does (out of the cluster, set webhook_url; or webhook_port 0)",
            namespace, SERVICE_NAME)
    except ApiError:
        pass  # not allowed to look: nothing to warn about
