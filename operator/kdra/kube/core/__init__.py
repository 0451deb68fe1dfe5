"""The pure part of the Kubernetes edge: the kdra flavour's pod<->claim conventions, the
agent's Lease names, bounded object names, pool ownership, untrusted input, printable
strings, backoff (map: :mod:`kdra.kube`).

Invariant: no I/O, no clock, no API client; imports only ``kdra.dra`` and itself.
"""
