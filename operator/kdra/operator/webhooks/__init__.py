"""The operator's webhooks: what the API server calls before it stores an object.

::

    server.py           the webhook server: routes, reviews, start-up order, upkeep timer
    maintenance.py      its certificate and the webhook configurations, kept current
    certs.py            the private CA and the serving certificate, rotation
    pki.py              X.509 building (also the development environment's control planes)
    conversion.py       /convert: v1 <-> v1alpha3, and the CRDs pointed at the server
    gpu_lookup.py       which claims of a pod being created may get GPUs
    extended_lookup.py  which DeviceClass serves an extended resource name
    process.py          ``kdra webhooks``: the server alone, without controllers

The decisions are the operator's core (:mod:`kdra.operator.core.admission` and its siblings);
the HTTP transport is :mod:`kdra.kube.webhook_server`.
"""
