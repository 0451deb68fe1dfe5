"""The ``kdra`` command: one entry point, one subcommand per program.

    kdra operator | webhooks     the operator (kdra.operator), or its webhook server alone
    kdra agent [health mark]     the node agent (kdra.agent)
    kdra describe | check        the command-line tools (kdra.cli; check: kdra.checks)

Each subcommand's module is imported only when it runs, so ``kdra --help`` stays fast and a
missing optional piece (e.g. NVML on a machine without GPUs) never breaks the others. The
dev-only commands (``demo``, ``controlplane``, ``node``) are ``python -m kdra_devenv``'s: the
product never imports the development environment.

Invariants: the only module (with :mod:`kdra.checks`) that imports more than one program,
and each only inside the function of its subcommand (the settings modules, which add the
flags, aside).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kdra import __version__

Command = Callable[[argparse.Namespace], int]


def _logging(args: argparse.Namespace) -> str | None:
    """Configure the process's logging from its flags (kdra.kube.logs); the error, if bad."""
    from kdra.kube import flags, logs

    try:
        logs.configure(flags.settings_from_args(args, logs.LogSettings))
    except ValueError as exc:
        return str(exc)
    return None


def _operator(args: argparse.Namespace) -> int:
    from kdra.operator.handlers import run_operator
    from kdra.operator.settings import from_args

    return run_operator(from_args(args))


def _webhooks(args: argparse.Namespace) -> int:
    from kdra.operator.settings import from_args
    from kdra.operator.webhooks.process import run_webhooks

    return run_webhooks(from_args(args))


def _agent(args: argparse.Namespace) -> int:
    from kdra.agent.process import run_agent
    from kdra.agent.settings import agent_from_args

    return run_agent(agent_from_args(args))


def _health_mark(args: argparse.Namespace) -> int:
    from kdra.agent.health import mark_command

    return mark_command(args)


def _describe(args: argparse.Namespace) -> int:
    from kdra.cli.describe import run_describe

    return run_describe(args)


def _check(args: argparse.Namespace) -> int:
    from kdra.checks import run_check

    return run_check(kubeconfig=args.kubeconfig, cdi_dirs=args.cdi_dir or [],
                     state_dirs=args.state_dir or [], nodes=args.node or [],
                     namespace=args.namespace, lease_grace=args.lease_grace,
                     output=args.output)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kdra",
        description="Kubernetes Dynamic Resource Allocation with structured parameters.",
    )
    parser.add_argument("--version", action="version", version=f"kdra {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    op = sub.add_parser(
        "operator",
        help="run the operator (claim controller, ...) against the current cluster",
        description="Run kdra's operator. Every flag also reads KDRA_<FLAG> from the "
        "environment (e.g. KDRA_METRICS_PORT).",
    )
    from kdra.agent import settings as agent_settings
    from kdra.operator import settings as operator_settings

    operator_settings.add_arguments(op)
    _add_logging(op)
    op.set_defaults(func=_operator)

    hooks = sub.add_parser(
        "webhooks",
        help="serve only the webhooks (conversion /convert and admission), no controllers",
        description="Run kdra's webhook server alone: /convert (resource.kdra.dev v1 <-> "
        "v1alpha3), /validate, /mutate-pods. Takes the operator's flags; only --webhook-*, "
        "--namespace, --kubeconfig and --event-loop matter. Every flag also reads "
        "KDRA_<FLAG> from the environment.",
    )
    operator_settings.add_arguments(hooks)
    _add_logging(hooks)
    hooks.set_defaults(func=_webhooks)

    agent = sub.add_parser(
        "agent",
        help="run the node agent: publish a node's devices, prepare its claims",
        description="Run kdra's node agent for NODE_NAME (or many simulated nodes): discover "
        "devices (NVML, or --inventory FILE), publish ResourceSlices, renew a heartbeat Lease, "
        "prepare claims allocated to the node (CDI specs, checkpoint, status.devices). Every "
        "flag also reads KDRA_<FLAG> from the environment.",
    )
    agent_settings.add_arguments(agent)
    _add_logging(agent)
    agent.set_defaults(func=_agent)
    agent_sub = agent.add_subparsers(dest="agent_command", metavar="ADMIN", required=False)
    health = agent_sub.add_parser(
        "health", help="administer device health (see `kdra agent health mark --help`)")
    health_sub = health.add_subparsers(dest="health_command", metavar="ACTION", required=True)
    mark = health_sub.add_parser(
        "mark", help="declare a device unhealthy, lost or healthy again",
        description="Record in the agent's marks file that a device is unhealthy (its slice "
        "gets the gpu.kdra.dev/unhealthy taint with effect NoSchedule after the debounce), "
        "lost (NoExecute: pods not tolerating it are evicted) or healthy (the taint goes after "
        "the settled period). The running agent reads the file at its next poll.")
    mark.add_argument("device", help="device name, e.g. gpu-0")
    mark.add_argument("health", metavar="unhealthy|lost|healthy")
    mark.add_argument("--node", default=None,
                      help="node whose device it is (default: $NODE_NAME, else every node)")
    mark.add_argument("--driver", default="gpu.kdra.dev", help="driver (default gpu.kdra.dev)")
    mark.add_argument("--reason", default="",
                      help="short reason, the taint's value (default MarkedUnhealthy/MarkedLost)")
    mark.add_argument("--state-dir", default=None,
                      help="the agent's state directory (default $KDRA_STATE_DIR, /var/lib/kdra)")
    mark.add_argument("--marks-file", default=None,
                      help="the marks file (default $KDRA_HEALTH_MARKS, "
                      "<state-dir>/health-marks.json)")
    mark.set_defaults(func=_health_mark)

    desc = sub.add_parser(
        "describe",
        help="show devices per node and pool: free, or allocated to which claim and pod",
        description="Print, per node and pool, how many devices are free and allocated, each "
        "device with the claim, request and pods holding it (and whether the node agent "
        "reported it Ready), and every claim with its devices. Reads ResourceSlices and "
        "ResourceClaims (resource.kdra.dev) with the current kubeconfig.",
    )
    desc.add_argument("--kubeconfig", default=None,
                      help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    desc.add_argument("-o", "--output", choices=("table", "json"), default="table",
                      help="table (default) or json")
    desc.add_argument("-n", "--namespace", default=None,
                      help="only claims of this namespace (devices of all pools still show "
                      "which claims hold them)")
    desc.add_argument("--node", default=None, help="only pools on this node (and its claims)")
    desc.add_argument("--driver", default=None, help="only pools of this driver")
    desc.add_argument("--summary", action="store_true",
                      help="one line per pool and per claim, no per-device lines")
    desc.set_defaults(func=_describe)

    chk = sub.add_parser(
        "check",
        help="check kdra's invariants on the cluster (and a node agent's disk); exit 1 if any "
        "is violated",
        description="Read pods, ResourceClaims, ResourceSlices, Nodes and agent Leases and "
        "report every broken invariant: a device allocated twice, a bound pod whose claims are "
        "not allocated / reserved for it / admitting its node / Ready, a claim reserved for a "
        "pod that is gone, an allocated claim reserved for no one, a slice of a deleted node. "
        "With --cdi-dir/--state-dir also the node-local state: every prepared claim has its "
        "CDI spec and checkpoint entry, and nothing else does. Exit code 0: all hold; 1: "
        "violations; 2: the cluster could not be read.",
    )
    chk.add_argument("--kubeconfig", default=None,
                     help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    chk.add_argument("--cdi-dir", action="append", default=None,
                     help="a node agent's CDI spec directory (repeatable)")
    chk.add_argument("--state-dir", action="append", default=None,
                     help="a node agent's state directory with checkpoint-<node>.json files "
                     "(repeatable)")
    chk.add_argument("--node", action="append", default=None,
                     help="a node served from these directories even if it has no checkpoint "
                     "yet (repeatable; nodes with a checkpoint or CDI spec are always checked)")
    chk.add_argument("--namespace", default="kdra-system",
                     help="namespace of the agents' heartbeat Leases (default: kdra-system)")
    chk.add_argument("--lease-grace", type=float, default=None,
                     help="also report slices whose agent Lease expired more than this many "
                     "seconds ago (the operator's --slice-gc-grace; default: not checked)")
    chk.add_argument("-o", "--output", choices=("text", "json"), default="text",
                     help="text (default) or json")
    chk.set_defaults(func=_check)

    return parser


LOGGING_COMMANDS = ("operator", "webhooks", "agent")
"""The long-running processes: they take kdra.kube.logs' flags (--log-level, -v,
--log-format)."""


def _add_logging(parser: argparse.ArgumentParser) -> None:
    from kdra.kube import flags, logs

    flags.add_arguments(parser, logs.LogSettings)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in LOGGING_COMMANDS and getattr(args, "agent_command", None) is None:
        problem = _logging(args)
        if problem:
            print(f"kdra {args.command}: {problem}", file=sys.stderr)
            return 2
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
