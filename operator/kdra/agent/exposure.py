"""Device exposure on the agent's node: the NRI plugin's policy, fed from the agent's state.

At each container creation the runtime asks the agent's NRI plugin
(:mod:`kdra.agent.nri`) what the container gets; :class:`ExposurePolicy` gathers
what :func:`kdra.agent.core.exposure.decide` needs — the claims in the agent's cache reserved for
the container's pod, each with the result the node's checkpoint recorded for it — and
:func:`make_nri_plugin` builds the plugin from the agent's settings.

Invariants:
- The policy reads only the agent's memory (its claim cache and checkpoint): no I/O, no
  ``await``, microseconds per container, well inside the runtime's 2-second request timeout.
- The plugin runs only for an agent serving one real node: not for simulated nodes
  (``--simulate-nodes``, ``--create-nodes``: no container runtime is theirs), not when
  ``--nri-socket`` is empty. It starts once the agent's first LIST of claims is cached, so a
  claim is never taken for unprepared only because the agent has not seen it yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from kdra.agent.core.backend import Backends
from kdra.agent.core.checkpoint import Checkpoint
from kdra.agent.core.exposure import (
    Decision,
    PodInfo,
    PreparedClaim,
    decide,
    prepared_claim,
    reserved_for,
)
from kdra.agent.nri.messages import Container, PodSandbox
from kdra.agent.nri.plugin import NriPlugin
from kdra.agent.settings import AgentSettings
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.store import JSON

log = logging.getLogger(__name__)


class ExposurePolicy:
    """The devices of a container on ``node``, from the agent's claim cache (``claims``)
    and the node's checkpoint; the env conventions of the agent's device ``backends``."""

    def __init__(self, node: str, *, claims: Callable[[], Iterable[JSON]],
                 checkpoint: Callable[[], Checkpoint],
                 drivers: Callable[[], Sequence[str]], backends: Backends) -> None:
        self.node = node
        self.claims = claims
        self.checkpoint = checkpoint
        self.drivers = drivers
        self.backends = backends

    def __call__(self, pod: PodSandbox, container: Container) -> Decision:
        prepared: list[PreparedClaim] = []
        if CLAIMS_ANNOTATION in pod.annotations:
            checkpoint = self.checkpoint()
            drivers = list(self.drivers())
            for claim in self.claims():
                meta = claim.get("metadata") or {}
                if meta.get("namespace") != pod.namespace or not reserved_for(claim, pod.uid):
                    continue
                entry = checkpoint.claims.get(str(meta.get("uid", "")))
                prepared.append(prepared_claim(claim, entry, self.node, drivers))
        return decide(PodInfo(pod.uid, pod.namespace, pod.name, pod.annotations),
                      container.name, container.env, prepared, self.node,
                      backends=self.backends)


def make_nri_plugin(settings: AgentSettings, nodes: Sequence[str], policy: ExposurePolicy
                    ) -> NriPlugin | None:
    """The agent's NRI plugin, or None where it must not run (see the module's invariants)."""
    if not settings.nri_socket:
        log.info("NRI: off (--nri-socket is empty): containers get their devices only "
                 "through the webhook's env (not tamper-proof)")
        return None
    if len(nodes) != 1 or settings.simulate_nodes or settings.create_nodes:
        log.info("NRI: off for simulated nodes (no container runtime serves them)")
        return None
    return NriPlugin(settings.nri_socket, policy)
