"""``python -m kdra_devenv``: the development environment's commands (dev-only, not in the
product's wheel or image).

    python -m kdra_devenv demo [--node real]     ``make demo``: a control plane, kdra, the examples
    python -m kdra_devenv controlplane           a control plane alone (etcd, kube-apiserver, ...)
    python -m kdra_devenv node up | down         kdra on a real kubelet node of this machine

The package is importable where the Makefile or the tests put ``devenv/`` on the path (the
venv's ``kdra-devenv.pth``, pytest's ``pythonpath``); it imports kdra, never the other way.

Invariants: each command's module is imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]


def _demo(args: argparse.Namespace) -> int:
    if args.node == "real":
        from kdra_devenv.demo_node import run_node_demo

        return run_node_demo(interactive=not args.no_wait, workdir=args.dir)
    from kdra_devenv.demo import run_demo

    return run_demo(interactive=not args.no_wait, workdir=args.dir)


def _controlplane(args: argparse.Namespace) -> int:
    from kdra_devenv import controlplane

    return controlplane.main(["--dir", str(args.dir)] if args.dir else [])


def _node(args: argparse.Namespace) -> int:
    from kdra_devenv.nodecmd import node_down, node_up

    if args.action == "down":
        return node_down()
    return node_up(workdir=args.dir, deploy=not args.no_deploy, examples=args.examples,
                   native=args.flavour == "native")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdra_devenv",
        description="kdra's development environment: local control planes and real nodes of "
        "real binaries, for the demo, the tests and the benchmarks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo",
        help="run a local control plane with kdra's CRDs and the seed's example objects",
        description="Start etcd + kube-apiserver on loopback (real binaries, built on first "
        "use), install the CRDs, apply manifests/examples/seed and print what the API holds.",
    )
    demo.add_argument("--no-wait", action="store_true",
                      help="print the objects and stop (default: keep running until Ctrl-C)")
    demo.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    demo.add_argument("--node", choices=("simulated", "real"), default="simulated",
                      help="simulated (default): agents simulate the nodes, nothing runs; "
                      "real: a kubelet node of this machine (root), kdra deployed as pods from "
                      "the Dockerfile's image, and the example pods run and print the devices "
                      "they see")
    demo.set_defaults(func=_demo)

    cp = sub.add_parser(
        "controlplane",
        help="run only the local control plane (etcd, kube-apiserver, controller-manager)",
    )
    cp.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    cp.set_defaults(func=_controlplane)

    node = sub.add_parser(
        "node",
        help="run kdra on a real kubelet node of this machine (root): up, or down",
        description="up: start a local control plane and a real node (containerd 2.x with "
        "NRI and CDI, runc, CNI, kubelet), build kdra's image from the Dockerfile, deploy "
        "kdra with its manifests (operator and agent as pods) and run until Ctrl-C, which "
        "undoes every host change. down: stop a running node from another shell, or undo "
        "what a killed one left behind.",
    )
    node.add_argument("action", choices=("up", "down"))
    node.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    node.add_argument("--no-deploy", action="store_true",
                      help="only the node: do not build the image or apply kdra's manifests")
    node.add_argument("--examples", action="store_true",
                      help="also apply the GPU examples and the seed's cats")
    node.add_argument("--flavour", choices=("kdra", "native"), default="kdra",
                      help="native: resource.k8s.io/v1, the agent as the kubelet's DRA plugin "
                           "(manifests/overlays/node-native; claims allocated by kube-scheduler)")
    node.set_defaults(func=_node)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Command = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
