"""The ``kdra`` command: one entry point, one subcommand per job.

Each subcommand's module is imported only when it runs, so ``kdra --help`` stays fast and a
missing optional piece (e.g. NVML on a machine without GPUs) never breaks the others.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kdra import __version__

Command = Callable[[argparse.Namespace], int]


def _operator(args: argparse.Namespace) -> int:
    from kdra.handlers import run_operator
    from kdra.settings import from_args

    return run_operator(from_args(args))


def _agent(args: argparse.Namespace) -> int:
    from kdra.services.agent.runner import run_agent
    from kdra.settings import agent_from_args

    return run_agent(agent_from_args(args))


def _demo(args: argparse.Namespace) -> int:
    from kdra.demo import run_demo

    return run_demo(interactive=not args.no_wait, workdir=args.dir)


def _controlplane(args: argparse.Namespace) -> int:
    from kdra.devenv import controlplane

    return controlplane.main(["--dir", str(args.dir)] if args.dir else [])


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
    from kdra.settings import AgentSettings, add_arguments

    add_arguments(op)
    op.set_defaults(func=_operator)

    agent = sub.add_parser(
        "agent",
        help="run the node agent: publish a node's devices, prepare its claims",
        description="Run kdra's node agent for NODE_NAME (or many simulated nodes): discover "
        "devices (NVML, or --inventory FILE), publish ResourceSlices, renew a heartbeat Lease, "
        "prepare claims allocated to the node (CDI specs, checkpoint, status.devices). Every "
        "flag also reads KDRA_<FLAG> from the environment.",
    )
    add_arguments(agent, AgentSettings)
    agent.set_defaults(func=_agent)

    demo = sub.add_parser(
        "demo",
        help="run a local control plane with kdra's CRDs and the seed's example objects",
        description="Start etcd + kube-apiserver on loopback (real binaries, built on first "
        "use), install the CRDs, apply manifests/examples/seed and print what the API holds.",
    )
    demo.add_argument("--no-wait", action="store_true",
                      help="print the objects and stop (default: keep running until Ctrl-C)")
    demo.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    demo.set_defaults(func=_demo)

    cp = sub.add_parser(
        "controlplane",
        help="run only the local control plane (etcd, kube-apiserver, controller-manager)",
    )
    cp.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    cp.set_defaults(func=_controlplane)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
