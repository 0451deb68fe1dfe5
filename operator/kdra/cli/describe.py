"""``kdra describe``: per node and pool, which devices are free and which claim and pod hold
the others, and every claim with its devices (the view: :mod:`kdra.cli.core.describe`).

Reads ResourceSlices and ResourceClaims once with the command-line tools' synchronous client
(:class:`kdra.kube.reader.Reader`, as ``kubectl kdra``), of the API flavour the cluster has
(``--flavour`` to choose).
Exit code 0, or 1 when the cluster cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys

from kdra.cli.core.describe import describe, render
from kdra.kube.core.printable import MAX_LINE, printable
from kdra.kube.reader import ClusterError, DraKinds, Reader, Unreadable


def run_describe(args: argparse.Namespace) -> int:
    """``kdra describe`` with its parsed arguments (``kubeconfig``, ``namespace``, ``node``,
    ``driver``, ``output``, ``summary``)."""
    try:
        api = Reader(args.kubeconfig)
    except Exception as exc:  # any kubeconfig / in-cluster configuration problem
        print(f"kdra describe: no cluster configuration: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 1
    try:
        kinds = DraKinds.of(api.flavour(getattr(args, "flavour", "auto")))
        slices = api.list(kinds.slices)
        claims = api.list(kinds.claims, args.namespace or None)
    except Unreadable as exc:
        print(f"kdra describe: the API server answered: {printable(exc, 500)}",
              file=sys.stderr)
        return 1
    except ClusterError as exc:
        print(f"kdra describe: cannot read the cluster: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 1
    finally:
        api.close()
    view = describe(slices, claims, node=args.node, driver=args.driver)
    if args.output == "json":
        print(json.dumps(view.to_json(), indent=2))
    else:
        sys.stdout.write(render(view, devices=not args.summary))
    return 0
