"""``kubectl kdra why`` as text: :func:`render_why` prints an
:class:`~kdra.cli.core.why.Explanation` — a headline, what kdra-scheduler said, the claims, the
node groups, the nearest fits, hints and notes.

Invariants:
- Rendered text holds no control sequences: every cluster string in it passes through
  :func:`kdra.kube.core.printable.printable` (table cells in :func:`~kdra.cli.core.tables.table`).
- Pure: text from the explanation only.
"""

from __future__ import annotations

from collections.abc import Sequence

from kdra.cli.core.tables import table
from kdra.cli.core.why import MAX_NODES_LISTED, Explanation
from kdra.kube.core.printable import MAX_LINE, printable

__all__ = ["render_why"]


def render_why(explanation: Explanation, *, bold: bool = False) -> str:
    """The explanation as text: a headline, what kdra-scheduler said (and why, unless plainly
    Unschedulable), the claims, the node groups, the nearest fits, hints on what a reason
    means, and notes on what could not be read."""
    def strong(text: str) -> str:
        return f"\033[1m{text}\033[0m" if bold else text

    def line(text: str) -> str:  # a line of kdra's holding cluster strings (tables: cells)
        return printable(text, MAX_LINE)

    out = [strong(line(f"Pod {explanation.pod}: {explanation.summary}"))]
    if explanation.condition:
        reason = explanation.condition_reason
        shown = f" ({reason})" if reason not in ("", "Unschedulable", explanation.condition) \
            else ""
        out.append(line(f"kdra-scheduler said{shown}: {explanation.condition}"))
    if explanation.claims:
        rows = []
        for claim in explanation.claims:
            detail = claim.problem or ", ".join(claim.devices) or "-"
            if not claim.requests:
                rows.append((claim.entry, claim.name or "-", claim.state, claim.node or "-",
                             "-", "-", "-", detail))
            for request in claim.requests:
                for index, selector in enumerate(request.selectors or ("-",)):
                    first = index == 0
                    rows.append((claim.entry if first else "", claim.name if first else "",
                                 claim.state if first else "", "-" if first else "",
                                 request.name if first else "", request.device_class
                                 if first else "", request.count if first else "", selector))
        out.append(strong("Claims:") + "\n" + table(
            ("ENTRY", "CLAIM", "STATE", "NODE", "REQUEST", "CLASS", "COUNT",
             "DEVICES / SELECTORS"), rows))
    if explanation.groups:
        groups = [(str(len(group.nodes)), group.reason, _names(group.nodes))
                  for group in explanation.groups]
        out.append(strong("Nodes that cannot take it, by reason:") + "\n"
                   + table(("NODES", "WHY", "WHICH"), groups))
    if explanation.fits and explanation.verdict == "fits":
        out.append(line(f"Fits now on {len(explanation.fits)} node(s): "
                        f"{_names(explanation.fits)} (kdra-scheduler binds it on its next "
                        "attempt)"))
    if explanation.nearest:
        lines = [strong("Nearest fit, if devices were freed:")]
        for nearest in explanation.nearest:
            n = len(nearest.devices)
            held = "; ".join(nearest.holders) or "no claim found"
            lines.append(line(f"  {nearest.node} would fit if {n} device"
                              f"{'s' if n != 1 else ''} {'were' if n != 1 else 'was'} freed"
                              f"{'' if nearest.minimal else ' (or fewer)'}: "
                              f"{_by_pool(nearest.devices)} — held by {held}"))
        out.append("\n".join(lines))
    out.extend(line(f"Hint: {hint}") for hint in explanation.hints)
    out.extend(line(f"Note: {note}") for note in explanation.notes)
    return "\n\n".join(out) + "\n"


def _by_pool(devices: Sequence[str]) -> str:
    """``driver/pool/a``, ``driver/pool/b`` → ``driver/pool: a, b`` (pools in order)."""
    pools: dict[str, list[str]] = {}
    for device in devices:
        pool, _, name = device.rpartition("/")
        pools.setdefault(pool, []).append(name)
    return "; ".join(f"{pool}: {', '.join(names)}" for pool, names in pools.items())


def _names(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[:MAX_NODES_LISTED])
    more = len(nodes) - MAX_NODES_LISTED
    return shown + (f" and {more} more" if more > 0 else "")
