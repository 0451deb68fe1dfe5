"""The node agent's pure core: inventory, publication, health, preparation, exposure and the
node-local check (map: :mod:`kdra.agent`).

Invariant: no I/O, no clock, no API client; imports only ``kdra.dra``, ``kdra.kube.core`` and
itself (import-linter).
"""
