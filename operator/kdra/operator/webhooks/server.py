"""The admission webhooks' HTTPS server, its certificates and its webhook configurations.

The operator starts one :class:`WebhookServer` (unless ``webhook_port`` is 0). It serves

* ``POST /validate`` — :func:`kdra.operator.core.admission.validate` (claims, templates,
  classes, and pods whose kdra keys are written; kdra's own identities,
  :attr:`WebhookServer.trusted`, may write kdra-owned keys; for an admin-access claim it reads
  the namespace's labels), and :func:`kdra.operator.core.bindings.binding_decision` for the
  operator's own pod bindings and evictions (the pod read from the API server); a
  ResourceClaim being created is also checked against its namespace's DeviceQuotas
  (:mod:`kdra.operator.core.quota_admission`),
* ``POST /mutate-pods`` — :func:`kdra.operator.core.admission.mutate_pod` (with the
  DeviceClasses' extended resource names when the pod asks for one,
  :mod:`kdra.operator.webhooks.extended_lookup`),
* ``POST /convert`` — :func:`kdra.operator.webhooks.conversion.answer` (kdra's four kinds
  between ``v1`` and ``v1alpha3``),
* ``GET /healthz`` — ``ok``,

each request read by :mod:`kdra.kube.webhook_intake` (the caller's client certificate
for the admission paths when ``webhook_client_ca`` is set, the body's size, time and JSON
value count, decoding in a worker thread),

over TLS with either a supplied certificate (``webhook_cert_dir``, re-read periodically) or a
generated one kept in the Secret ``kdra-webhook-tls`` (shared by replicas, rotated by whichever
replica first finds it due, see :mod:`kdra.operator.webhooks.certs`). With
``webhook_manage_config`` it creates and keeps the ``kdra-mutating`` / ``kdra-validating``
configurations (:mod:`kdra.operator.core.webhook_configs`) current, CA bundle included, and
points the four CRDs' ``spec.conversion`` at this server with the same CA bundle
(:mod:`kdra.operator.webhooks.conversion`); where it may change only the configurations' CA
bundle (in a cluster, the ValidatingAdmissionPolicy ``kdra-operator-webhooks``), it keeps that
current and warns that the rest differs from this version's (re-apply manifests/webhooks).
Reading, generating and rotating the certificate and writing the configurations are
:mod:`kdra.operator.webhooks.maintenance`'s; this module serves and decides when.

Invariants:
- The server listens before the configurations are written, so the API server never calls a
  webhook nobody serves because of kdra's own start-up order; the operator starts its
  controllers (which create claims) only after :meth:`WebhookServer.start` returned.
- On rotation the configurations get the new CA bundle (which still trusts the previous CA)
  *before* this replica switches to the new certificate.
- The configurations are left in place on shutdown: failing closed is the point (see
  :mod:`kdra.operator.core.webhook_configs` for why ordinary pods are unaffected).
- Decisions run in a worker thread: compiling a 10 KiB CEL selector must not stall kopf's
  event loop (conversions too, :mod:`kdra.operator.webhooks.conversion`).
- HTTP is :mod:`kdra.kube.webhook_server`'s: the handlers here take a body and return a reply.
- Every review gets an AdmissionReview answer, even one whose object cannot be decoded (nested
  deeper than the JSON decoder's limit): it is denied, naming why, if its uid can be read.
- No request body is read past its path's limit, nor decoded on the event loop
  (:mod:`kdra.kube.webhook_intake`, for every path :mod:`kdra.kube.webhook_server` serves).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kdra.dra.errors import InvalidObject
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.resources import NAMESPACES, PODS
from kdra.kube.webhook_intake import ADMISSION, CONVERSION, Intake, Undecodable
from kdra.kube.webhook_server import HttpsServer, Reply
from kdra.operator.core import admission
from kdra.operator.core.bindings import binding_decision, is_binding, is_eviction
from kdra.operator.core.quota_admission import with_quotas
from kdra.operator.core.webhook_configs import (
    CONVERT_PATH,
    HEALTHZ_PATH,
    MUTATE_PODS_PATH,
    TLS_SECRET,
    VALIDATE_PATH,
    Endpoint,
    service_dns_names,
    trusted_usernames,
)
from kdra.operator.scheduler.quota import namespace_quotas
from kdra.operator.settings import OperatorSettings
from kdra.operator.webhooks import conversion
from kdra.operator.webhooks.certs import TlsBundle
from kdra.operator.webhooks.extended_lookup import extended_classes
from kdra.operator.webhooks.gpu_lookup import GpuClaimLookup
from kdra.operator.webhooks.maintenance import apply_configurations, check_service, fetch_bundle

__all__ = ["CHECK_INTERVAL", "WebhookServer", "start_webhooks"]

log = logging.getLogger(__name__)

CHECK_INTERVAL = 300.0  # seconds between certificate / configuration checks
_UNSPECIFIED = frozenset({"", "0.0.0.0", "::", "[::]"})


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def start_webhooks(settings: OperatorSettings, client: KubeClient,
                         flavour: Flavour = KDRA) -> WebhookServer | None:
    """Start the webhook server the settings ask for (None when ``webhook_port`` is 0)."""
    if not settings.webhook_port:
        log.info("admission webhooks are off (webhook_port 0)")
        return None
    server = WebhookServer(settings, client, flavour=flavour)
    await server.start()
    return server


class WebhookServer:
    """Serve the webhooks; :meth:`start`, then :meth:`stop`. :meth:`refresh` runs one round
    of certificate and configuration maintenance (the server runs it every
    ``check_interval`` seconds)."""

    def __init__(self, settings: OperatorSettings, client: KubeClient | None, *,
                 check_interval: float = CHECK_INTERVAL,
                 clock: Callable[[], dt.datetime] = _utcnow,
                 flavour: Flavour = KDRA) -> None:
        if client is None and (settings.webhook_manage_config or not settings.webhook_cert_dir):
            raise ValueError("an API client is needed unless certificates are supplied and "
                             "the configurations are not managed")
        self.settings = settings
        self.client = client
        self.flavour = flavour
        """The API flavour the webhooks serve (which pods have claims, which configurations)."""
        self.check_interval = check_interval
        self.clock = clock
        self.endpoint = Endpoint(namespace=settings.namespace, url=settings.webhook_url)
        self.trusted: tuple[str, ...] = trusted_usernames(settings.namespace)
        """Usernames that may write kdra-owned pod annotations (settings.trusted_users)."""
        self.bundle: TlsBundle | None = None
        self.port = settings.webhook_port
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        names = frozenset(n.strip() for n in settings.webhook_client_names.split(",")
                          if n.strip())
        self.intake = Intake(settings.webhook_client_ca, names)
        """Who may call, and how much they may send (:mod:`kdra.kube.webhook_intake`)."""
        self.intake.configure(self._ssl)
        self._http: HttpsServer | None = None
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def hosts(self) -> list[str]:
        """The names a generated serving certificate must cover."""
        hosts = list(service_dns_names(self.settings.namespace))
        extra = [self.settings.webhook_host.strip("[]")]
        if self.settings.webhook_url:
            extra.append(urlparse(self.settings.webhook_url).hostname or "")
        for host in extra:
            if host not in _UNSPECIFIED and host not in hosts:
                hosts.append(host)
        return hosts

    async def start(self) -> None:
        self.trusted = await self._trusted()
        log.info("kdra-owned pod annotations may be written by %s", ", ".join(self.trusted))
        bundle = await self._fetch_bundle()
        self._load(bundle)
        http = HttpsServer(self.settings.webhook_host, self.settings.webhook_port, self._ssl,
                           self.intake)
        http.post_json(VALIDATE_PATH, self._validate, limits=ADMISSION,
                       undecodable=_undecodable_review)
        http.post_json(MUTATE_PODS_PATH, self._mutate_pods, limits=ADMISSION,
                       undecodable=_undecodable_review)
        # No caller check: the API server sends no credentials to conversion webhooks. The
        # body goes to the conversion undecoded (it decodes it in a worker thread).
        http.post_raw(CONVERT_PATH, conversion.answer, limits=CONVERSION,
                      undecodable=_undecodable_conversion)
        http.get(HEALTHZ_PATH, self._healthz)
        self._http = http
        self.port = await http.start()
        if self.settings.webhook_manage_config:
            await check_service(self.client, self.endpoint, self.settings.namespace)
            await self._apply_configurations(bundle)
        self._task = asyncio.create_task(self._maintain(), name="kdra-webhook-maintenance")
        log.info("admission webhooks serving on %s:%d (certificate valid until %s, %s; %s)",
                 self.settings.webhook_host, self.port, bundle.not_after().isoformat(),
                 "supplied" if self.settings.webhook_cert_dir else f"Secret {TLS_SECRET}",
                 f"admission callers need a client certificate of {self.intake.client_ca}"
                 if self.intake.client_ca else "admission callers are not authenticated: "
                 "only the NetworkPolicy limits who reaches the port")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._http is not None:
            await self._http.stop()
            self._http = None

    async def refresh(self) -> None:
        """Re-read (and if due, rotate) the certificate; bring the configurations up to date;
        switch the server to a changed certificate."""
        bundle = await self._fetch_bundle()
        if self.settings.webhook_manage_config:
            await self._apply_configurations(bundle)
        if bundle != self.bundle:
            self._load(bundle)
            log.info("webhook certificate reloaded (valid until %s)",
                     bundle.not_after().isoformat())

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook certificate/configuration check failed; "
                              "retrying in %.0fs", self.check_interval)

    async def _trusted(self) -> tuple[str, ...]:
        """settings.trusted_users, or the operator's ServiceAccount and its own username."""
        configured = [u.strip() for u in self.settings.trusted_users.split(",") if u.strip()]
        if configured:
            return tuple(sorted(set(configured)))
        own: list[str] = []
        if self.client is not None:
            try:
                own.append(await self.client.whoami())
            except (ApiError, OSError) as exc:
                log.warning("cannot tell the operator's own username (%s); trusting only the "
                            "ServiceAccount %s", exc, trusted_usernames(
                                self.settings.namespace)[0])
        return trusted_usernames(self.settings.namespace, own)

    # ------------------------------------------------------------------ upkeep

    async def _fetch_bundle(self) -> TlsBundle:
        """The certificate to serve (:func:`kdra.operator.webhooks.maintenance.fetch_bundle`)."""
        return await fetch_bundle(self.settings, self.client, self.hosts, self.clock,
                                  self.bundle)

    async def _apply_configurations(self, bundle: TlsBundle) -> None:
        """The webhook configurations and the CRDs' conversion with ``bundle``'s CA
        (:func:`kdra.operator.webhooks.maintenance.apply_configurations`)."""
        await apply_configurations(self.client, self.settings.namespace, self.endpoint, bundle,
                                   self.trusted, self.flavour,
                                   self.settings.scheduler_for_claims)

    def _load(self, bundle: TlsBundle) -> None:
        """Switch the server's TLS context to ``bundle`` (new connections use it)."""
        with tempfile.TemporaryDirectory(prefix="kdra-webhook-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(bundle.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(bundle.key_pem)
            self._ssl.load_cert_chain(cert, key)
        self.bundle = bundle

    # ------------------------------------------------------------------ HTTP

    async def _healthz(self) -> Reply:
        return Reply(text="ok")

    async def _validate(self, body: Any) -> Reply:
        return await self._review(body, admission.validate, bindings=True, objects=True)

    async def _namespace_labels(self, body: Any) -> dict[str, str] | None:
        """The labels of the reviewed object's namespace when the admin-access rule needs
        them (else, and when they cannot be read, None)."""
        request = body.get("request") if isinstance(body, Mapping) else None
        if not isinstance(request, Mapping):
            return None
        obj = request.get("object")
        if (self.client is None or not isinstance(obj, Mapping)
                or not admission.admin_access_requested(obj)):
            return None
        try:
            namespace = await self.client.get(NAMESPACES, str(request.get("namespace")))
        except (ApiError, OSError) as exc:
            log.warning("cannot read namespace %s for the admin-access rule: %s",
                        request.get("namespace"), exc)
            return None
        return dict((namespace.get("metadata") or {}).get("labels") or {})

    async def _validate_binding(self, body: Any, review: Mapping[str, Any]) -> Reply:
        """The operator's own bindings and evictions: only pods with schedulerName
        kdra-scheduler are bound, only pods that ask for claims evicted."""
        pod: dict[str, Any] | None = None
        namespace, name = review.get("namespace"), review.get("name")
        if self.client is not None and isinstance(namespace, str) and isinstance(name, str):
            try:
                pod = await self.client.get(PODS, name, namespace)
            except NotFound:
                pod = None
            except (ApiError, OSError) as exc:  # the API server applies the failure policy
                return Reply({"error": f"reading pod {namespace}/{name}: {exc}"}, status=503)
        try:
            answer = admission.review(body, lambda request: binding_decision(request, pod,
                                                                              self.flavour))
        except InvalidObject as exc:
            return Reply({"error": str(exc)}, status=400)
        if not answer["response"]["allowed"]:
            log.warning("denied %s: %s", _describe(body), answer["response"]["status"]["message"])
        return Reply(answer)

    async def _foreign_claims(self, body: Any) -> dict[str, tuple[str, str]] | None:
        """Native flavour: the entries of a pod being created that name a claim generated for
        another pod (:meth:`GpuClaimLookup.foreign_claims`); None elsewhere (the kdra flavour
        checks them in the mutating webhook, with the GPU lookup)."""
        request = body.get("request") if isinstance(body, Mapping) else None
        kind = request.get("kind") if isinstance(request, Mapping) else None
        if (self.client is None or self.flavour.device_annotations
                or not isinstance(kind, Mapping) or kind.get("kind") != "Pod"
                or kind.get("group", "") != ""):
            return None
        return await GpuClaimLookup(self.client, self.flavour).foreign_claims(body)

    async def _mutate_pods(self, body: Any) -> Reply:
        return await self._review(body, admission.mutate_pod, gpu_lookup=True)

    async def _review(self, body: Any, decide: admission.Decide, *,
                      gpu_lookup: bool = False, bindings: bool = False,
                      objects: bool = False) -> Reply:
        """``gpu_lookup``: the pod mutation learns which claims may get GPUs (env vars);
        ``bindings``: a pod Binding goes to :meth:`_validate_binding` instead;
        ``objects``: ``decide`` is :func:`admission.validate`, given kdra's identities and the
        labels of the object's namespace."""
        if bindings:
            review = body.get("request") if isinstance(body, Mapping) else None
            if isinstance(review, Mapping) and (is_binding(review) or is_eviction(review)):
                return await self._validate_binding(body, review)
        if objects:  # the validating webhook: kdra's identities, the namespace's labels
            labels, quotas, foreign = await asyncio.gather(
                self._namespace_labels(body), namespace_quotas(self.client, body),
                self._foreign_claims(body))
            decide = functools.partial(admission.validate, trusted=frozenset(self.trusted),
                                       namespace_labels=labels, flavour=self.flavour,
                                       foreign_claims=foreign,
                                       own_namespace=self.settings.namespace)
            decide = with_quotas(decide, quotas)
        if gpu_lookup and not self.flavour.device_annotations:  # native: schedulerName only
            foreign = await self._foreign_claims(body)
            decide = functools.partial(admission.mutate_pod, foreign_claims=foreign,
                                       flavour=self.flavour)
        elif gpu_lookup and self.client is not None:  # which claims may get GPUs (env vars),
            lookup = GpuClaimLookup(self.client)  # (and which are other pods' own claims),
            gpu_claims, extended = await asyncio.gather(  # which classes serve extended res.
                lookup.gpu_claims(body), extended_classes(self.client, body))
            decide = functools.partial(admission.mutate_pod, gpu_claims=gpu_claims,
                                       extended_classes=extended.mapping,
                                       extended_error=extended.error,
                                       extended_gpu_classes=extended.gpu_classes,
                                       foreign_claims=lookup.foreign)
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(None, admission.review, body, decide)
        except InvalidObject as exc:
            return Reply({"error": str(exc)}, status=400)
        response = answer["response"]
        if not response["allowed"]:
            log.info("denied %s: %s", _describe(body), response["status"]["message"])
        return Reply(answer)


def _undecodable_review(exc: Undecodable) -> Reply:
    """An AdmissionReview that cannot be decoded whole: denied, naming why, when its uid
    could be read; else an HTTP 400 (the API server applies the failure policy)."""
    if exc.uid is None:
        return Reply({"error": f"the body is not JSON that can be decoded: {exc.reason}"},
                     status=400)
    log.info("denied an AdmissionReview that cannot be decoded: %s", exc.reason)
    return Reply(admission.undecodable(exc.uid, exc.reason).to_review())


def _undecodable_conversion(exc: Undecodable) -> Reply:
    return Reply({"error": f"the body cannot be decoded: {exc.reason}"}, status=400)


def _describe(body: Mapping[str, Any]) -> str:
    request = body.get("request") or {}
    kind = (request.get("kind") or {}).get("kind", "?")
    name = request.get("name") or (request.get("object") or {}).get(
        "metadata", {}).get("generateName", "?")
    namespace = request.get("namespace")
    return f"{request.get('operation', '?')} {kind} {namespace + '/' if namespace else ''}{name}"
