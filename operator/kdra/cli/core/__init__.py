"""The command-line tools' pure core: the views behind ``kdra describe``, ``kubectl kdra
why`` and ``kdra check``'s cluster rules (map: :mod:`kdra.cli`).

Invariant: no I/O, no API client; imports only ``kdra.dra``, ``kdra.kube.core`` and itself
(import-linter).
"""
