"""``kubectl kdra``: the ``kubectl-kdra`` console script, so kubectl runs it as a plugin.

kubectl finds any executable named ``kubectl-<name>`` on PATH and runs it for ``kubectl
<name>``, handing over every argument; so the flags kubectl users know (``--kubeconfig``,
``--context``, ``-n``, ``-A``, ``-o``, ``--as``) are parsed here, before or after the command
(``kubectl kdra -n team-a why big``, as kubectl takes them), and ``why`` takes ``POD`` or
kubectl's ``pod/POD``. The commands live in :mod:`kdra.cli.kubectl_commands`; a krew
manifest is in ``hack/krew/kdra.yaml``.

Invariants:
- Moving the flags written before the command behind it changes nothing else: a flag's
  value stays with it (``-n why`` names the namespace ``why``), and help, ``--version`` or an
  unknown word before any command leave the arguments to argparse as given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kdra import __version__


def _common(parser: argparse.ArgumentParser, *, namespaced: bool = True,
            formats: Sequence[str] = ("table", "json", "yaml"),
            impersonate: bool = True) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file(s) (default: $KUBECONFIG, ~/.kube/config, or "
                        "the pod's service account)")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    parser.add_argument("--flavour", choices=("auto", "native", "kdra"), default="auto",
                        help="read native DRA objects (resource.k8s.io/v1) or kdra's CRDs "
                        "(resource.kdra.dev); auto (default): whichever the cluster has")
    if namespaced:
        parser.add_argument("-n", "--namespace", default=None,
                            help="namespace (default: the context's)")
    parser.add_argument("-o", "--output", choices=formats, default=formats[0],
                        help=f"{' | '.join(formats)} (default: {formats[0]})")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the tables: auto (on a terminal, unless NO_COLOR is set)")
    if impersonate:
        parser.add_argument("--as", dest="as_user", default=None, metavar="USER",
                            help="impersonate USER (as kubectl --as)")
        parser.add_argument("--as-group", dest="as_group", default=None, metavar="GROUP",
                            help="impersonate GROUP too (with --as)")


COMMANDS = ("free", "describe", "why", "top", "check")
VALUE_FLAGS = frozenset({"-n", "--namespace", "--kubeconfig", "--context", "-o", "--output",
                         "--color", "--as", "--as-group"})
"""The flags of :func:`_common` that take the next argument as their value."""
POD_TYPES = frozenset({"pod", "pods", "po"})


def command_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with the flags written before the command moved behind it (argparse's
    sub-commands take their flags after their name)."""
    args = list(argv)
    before: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token in COMMANDS:
            return [token, *before, *args[i + 1:]]
        if token in ("-h", "--help", "--version") or not token.startswith("-"):
            return args
        take = 2 if token in VALUE_FLAGS else 1
        before += args[i:i + take]
        i += take
    return args


def pod_argument(value: str) -> str:
    """``POD`` or ``pod/POD`` (``pods/``, ``po/``, as kubectl writes it) → the pod's name."""
    kind, slash, name = value.partition("/")
    if not slash:
        return value
    if kind.lower() not in POD_TYPES or not name or "/" in name:
        raise argparse.ArgumentTypeError(
            f"{value!r}: why explains a pod: give POD or pod/POD")
    return name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl kdra",
        description="See kdra's devices from your own kubeconfig: what is free, who holds what, "
        "why a pod waits. Reads only; works with your RBAC and says what it could not read.")
    parser.add_argument("--version", action="version", version=f"kubectl-kdra {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    free = sub.add_parser(
        "free", help="devices per class, node and pool: total, allocated, free, blocked, "
        "unhealthy",
        description="Per DeviceClass, node and pool: how many devices there are, how many are "
        "allocated, free (could be allocated now), blocked (held by nobody, but a shared "
        "counter it consumes is used up - a partition of a GPU whose other partitions are in "
        "use - or its slice taints it NoSchedule/NoExecute) and unhealthy (held by a claim "
        "but gone from the slices or reported unhealthy by the node agent), then totals per "
        "class. A device that allows multiple allocations is free while a share of its "
        "default size still fits. A device is counted for every "
        "class whose selectors it passes; '-' is the class of devices no class selects. Devices "
        "are the cluster's: -n only names the namespace whose claims are counted when you may "
        "not list every namespace's.")
    _common(free)
    free.add_argument("--class", dest="device_class", default=None,
                      help="only this DeviceClass ('-': devices no class selects); an unknown "
                      "class is an error")
    free.add_argument("--node", default=None, help="only this node")

    desc = sub.add_parser(
        "describe", help="every device: free, or held by which claim and pod; every claim",
        description="kdra describe, from your kubeconfig: per node and pool the devices, each "
        "with the claim, request and pods holding it (and whether the node agent reported it "
        "Ready), then every claim with its devices.")
    _common(desc)
    desc.add_argument("-A", "--all-namespaces", action="store_true",
                      help="claims of every namespace (the default unless -n is given)")
    desc.add_argument("--node", default=None, help="only pools on this node (and its claims)")
    desc.add_argument("--driver", default=None, help="only pools of this driver")
    desc.add_argument("--summary", action="store_true",
                      help="one line per pool and per claim, no per-device lines")

    why = sub.add_parser(
        "why", help="why a pod is not scheduled: per node group, its claims and selectors, "
        "the nearest fit",
        description="Evaluate POD now as kdra-scheduler would: what it last said, each claim "
        "with its requests and selectors, the nodes grouped by why they cannot take the pod, "
        "and the nearest node that would fit if N devices were freed (and who holds them).")
    why.add_argument("pod", metavar="POD", type=pod_argument,
                     help="the pod: NAME or pod/NAME")
    why.add_argument("--search-steps", type=int, default=None, metavar="N",
                     help="allocation search budget in steps (devices tried), shared as "
                     "kdra-scheduler shares it; default: the operator's default "
                     "--allocation-search-steps (1000000)")
    _common(why)

    tops = sub.add_parser(
        "top", help="who holds how many devices, by namespace and pod",
        description="Per namespace (most devices first): devices held, allocated and pending "
        "claims, devices per class; then per pod the devices of its claims.")
    _common(tops)
    tops.add_argument("-A", "--all-namespaces", action="store_true",
                      help="every namespace (the default unless -n is given)")

    chk = sub.add_parser(
        "check", help="kdra's invariants on the cluster (kdra check); exit 1 on a violation",
        description="kdra check from your kubeconfig: no device allocated twice, bound pods' "
        "claims allocated, reserved and prepared on their node, no stale reservations or "
        "slices. Exit code 0: all hold; 1: violations; 2: the cluster could not be read.")
    _common(chk, namespaced=False, formats=("text", "json"), impersonate=False)
    chk.add_argument("--system-namespace", default="kdra-system",
                     help="namespace of the agents' heartbeat Leases (default: kdra-system)")
    chk.add_argument("--lease-grace", type=float, default=None,
                     help="also report slices whose agent Lease expired this many seconds ago")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(command_first(sys.argv[1:] if argv is None else argv))
    from kdra.cli.kubectl_commands import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
