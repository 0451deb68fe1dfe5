"""Issue 22's input-side attacks, run against whatever kdra is importable, and what happened.

    .venv/bin/python bench/hostile.py                       # this checkout
    PYTHONPATH=/path/to/old/checkout/operator .venv/bin/python bench/hostile.py   # another one

Starts a local control plane and installs kdra as tests/e2e/test_hostile.py does
(tests/e2e/hostile_helpers.py: the manifests' RBAC, VAPs and webhooks; the operator and an
agent as their ServiceAccounts; attackers impersonate a namespace user), then runs each
attack and records what the cluster did: admitted or denied (and how long the error text
was), whether a fresh pod still binds, whether the operator restarts, what ``kdra check``
exits with, and the operator's peak RSS during the annotation attacks. Prints one table row
per attack; asserts nothing (tests/e2e/test_hostile.py asserts).

Old code may hang where new code refuses, so every wait has a deadline and a failed step is
recorded, not raised. Between attacks the attack's objects are deleted and, if the operator
died or could not restart, a fresh operator process is started.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.hostile_helpers import (
    API,
    CLAIMS,
    GPU_CLASS,
    Hostile,
    peak_rss_kib,
    pod_body,
    unique,
)

from kdra_devenv.controlplane import ControlPlane, binaries

CLAIMS_ANNOTATION = "resource.kdra.dev/claims"
STATUSES = "resource.kdra.dev/claim-statuses"
TEMPLATE = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
Row = dict[str, str]


def outcome(result: Any) -> str:
    if result.returncode == 0:
        return "admitted"
    return f"denied ({len(result.stderr)} chars)"


def quietly(step: Callable[[], Any], default: Any = None) -> Any:
    try:
        return step()
    except (AssertionError, RuntimeError, OSError) as exc:
        print(f"    ({type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr)
        return default


class Bench:
    def __init__(self, hostile: Hostile) -> None:
        self.h = hostile

    # ------------------------------------------------------------------ probes

    def binds(self, what: str) -> str:
        ok = quietly(lambda: self.h.fresh_pod_binds(what) or True, False)
        return "binds" if ok else "does NOT bind"

    def restart(self, timeout: float = 90.0) -> str:
        op = self.h.operator
        assert op is not None
        op.stop()
        try:
            op.start(timeout=timeout)
            return "restarts"
        except RuntimeError as exc:
            tail = str(exc)
            why = "address already in use" if "address already in use" in tail else "timeout"
            if op.popen is not None and op.popen.poll() is None:
                os.killpg(op.popen.pid, signal.SIGKILL)
                op.popen.wait()
            return f"restart FAILS ({why})"

    def ensure_operator(self) -> None:
        op = self.h.operator
        assert op is not None
        if not op.alive:
            quietly(lambda: op.start(timeout=120))

    def check(self) -> str:
        result = self.h.check()
        if "Traceback" in result.stderr:
            last = result.stderr.strip().splitlines()[-1][:80]
            return f"check CRASHES, rc {result.returncode} ({last})"
        lines = [line for line in result.stdout.splitlines() if ":" in line]
        rules = sorted({line.split(":", 1)[0] for line in lines})
        return f"check rc {result.returncode}" + (f" ({', '.join(rules)})" if rules else "")

    def delete(self, *names: str, kind: str = "pod") -> None:
        if names:
            self.h.plane.kubectl("delete", kind, *names, "-n", self.h.namespace,
                                 "--grace-period=0", "--force", "--ignore-not-found",
                                 "--wait=false", check=False)

    def operator_log(self) -> str:
        assert self.h.operator is not None
        return self.h.operator.log.read_text(errors="replace")

    # ------------------------------------------------------------------ attacks

    def attack1(self) -> Row:
        h = self.h
        names = [unique("late"), unique("late")]
        for name in names:
            h.create_as_user(pod_body(name, h.namespace, scheduler="kdra-scheduler"))
            quietly(lambda n=name: h.bound_pod(n, timeout=60))  # type: ignore[misc]
        deep = h.as_user("annotate", "pod", names[0], f"{CLAIMS_ANNOTATION}={'[' * 1000}")
        mixed = h.as_user("annotate", "pod", names[1],
                          f"{CLAIMS_ANNOTATION}=- {{name: a, resourceClaimName: b, 1: x}}")
        row = {"attack": "1: bad claims annotation added by UPDATE",
               "what": f"deep {outcome(deep)}, mixed keys {outcome(mixed)}",
               "restart": self.restart(), "check": self.check()}
        self.delete(*names)
        self.ensure_operator()
        row["fresh pod"] = self.binds("attack 1")
        return row

    def attack2(self) -> Row:
        h = self.h
        assert h.operator is not None and h.operator.popen is not None
        pid = h.operator.popen.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = int(next(line.split()[1] for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines()
                          if line.startswith("VmRSS:")))
        # The bomb: a 2,000-character container name anchored once, aliased ~26,000
        # times in containers (the old webhook reported each alias, repeating the name).
        head = ('- name: gpu\n  resourceClaimTemplateName: gpu\n  containers: [&c "'
                + "c" * 2000 + '"')
        bomb = head + ", *c" * ((104 * 1024 - len(head) - 1) // 4) + "]"
        started = time.monotonic()
        results = [h.create_as_user(pod_body(unique("bomb"), h.namespace, bomb))]
        seconds = time.monotonic() - started
        big = "x" * (256 * 1024 - len(CLAIMS_ANNOTATION) - 64)
        results.append(h.create_as_user(pod_body(unique("big"), h.namespace, big)))
        alive = h.operator.alive
        peak = peak_rss_kib(pid) if alive else 0
        row = {"attack": "2: 104 KiB YAML alias bomb, 256 KiB annotation",
               "what": f"bomb {outcome(results[0])} in {seconds:.1f}s, 256 KiB "
                       f"{outcome(results[1])}",
               "memory": (f"RSS {before / 1024:.0f} MiB, peak +{(peak - before) / 1024:.0f} "
                          "MiB" if alive else "operator died"),
               "restart": self.restart(), "check": self.check()}
        self.ensure_operator()
        row["fresh pod"] = self.binds("attack 2")
        return row

    def attack4(self) -> Row:
        h = self.h
        name = unique("deep")
        h.create_as_user({"apiVersion": API, "kind": "ResourceClaim",
                          "metadata": {"name": name, "namespace": h.namespace},
                          "spec": {"devices": {"requests": [
                              {"name": "gpu", "exactly": {
                                  "deviceClassName": GPU_CLASS}}]}}})
        entry = json.dumps({"driver": GPU_CLASS, "pool": h.node, "device": "gpu-0",
                            "data": "DATA"}).replace('"DATA"', '{"x":' * 1100 + "{}" + "}" * 1100)
        written = h.plane.kubectl("patch", CLAIMS, name, "-n", h.namespace,
                                  "--subresource=status", "--type=merge",
                                  "-p", '{"status": {"devices": [' + entry + "]}}", check=False)
        row = {"attack": "4: claim with status.devices[0].data nested 1,100 deep",
               "what": f"stored: {written.returncode == 0}",
               "fresh pod": self.binds("attack 4"), "restart": self.restart(),
               "check": self.check()}
        self.delete(name, kind=CLAIMS)
        self.ensure_operator()
        row["fresh pod"] += f"; after the claim is deleted: {self.binds('attack 4, deleted')}"
        return row

    def attack6(self) -> Row:
        h = self.h
        victim = unique("victim")
        h.create_as_user(pod_body(victim, h.namespace, TEMPLATE))
        bound = quietly(lambda: h.bound_pod(victim, timeout=60))
        if bound is None:
            return {"attack": "6: forged claim-statuses", "what": "victim not bound"}
        stolen = json.loads(bound["metadata"]["annotations"][STATUSES])["gpu"]
        offset = len(self.operator_log())
        thief, path, preset = unique("thief"), unique("path"), unique("preset")
        secret = "../../../../api/v1/namespaces/kdra-system/secrets/kdra-webhook-tls"
        results = [
            h.create_as_user(pod_body(thief, h.namespace, TEMPLATE,
                                      annotations={STATUSES: json.dumps({"gpu": stolen})})),
            h.create_as_user(pod_body(path, h.namespace, TEMPLATE,
                                      annotations={STATUSES: json.dumps({"gpu": secret})})),
            h.create_as_user(pod_body(preset, h.namespace, TEMPLATE, node=h.node,
                                      annotations={STATUSES: json.dumps({"gpu": stolen})}))]
        time.sleep(15)
        claim = json.loads(h.plane.kubectl("get", CLAIMS, stolen, "-n", h.namespace, "-o",
                                           "json").stdout)
        reserved = [r["name"] for r in claim["status"].get("reservedFor") or []]
        thief_pod = quietly(lambda: h.pod(thief), {}) or {}
        on_victim_gpu = False
        if thief_pod.get("spec", {}).get("nodeName"):
            record = json.loads(thief_pod["metadata"]["annotations"].get(STATUSES, "{}"))
            on_victim_gpu = record.get("gpu") == stolen
        log = self.operator_log()[offset:]
        row = {"attack": "6: forged claim-statuses (another pod's claim, ../ path, preset node)",
               "what": ", ".join(outcome(r) for r in results),
               "effect": (f"thief on the victim's GPU: {on_victim_gpu}; victim claim reserved "
                          f"for {reserved}; operator log: {log.count('Forbidden')} "
                          f"'Forbidden', {log.count('Traceback')} tracebacks"),
               "check": self.check()}
        self.delete(victim, thief, path, preset)
        row["restart"] = self.restart()
        self.ensure_operator()
        row["fresh pod"] = self.binds("attack 6")
        return row

    def attack7(self) -> Row:
        h = self.h
        env = h.create_as_user(pod_body(unique("env"), h.namespace, TEMPLATE, env=[
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
        forged_name = unique("forged")
        forged = h.create_as_user(pod_body(forged_name, h.namespace, scheduler="kdra-scheduler",
                                           annotations={"devices.resource.kdra.dev/main":
                                                        f"gpu.kdra.dev/{h.node}/gpu-0"}))
        time.sleep(10)
        forged_bound = bool((quietly(lambda: h.pod(forged_name), {}) or {})
                            .get("spec", {}).get("nodeName"))
        victim = unique("victim")
        h.create_as_user(pod_body(victim, h.namespace, TEMPLATE))
        quietly(lambda: h.bound_pod(victim, timeout=60))
        patched = h.as_user("annotate", "pod", victim, "--overwrite",
                            "gpus.resource.kdra.dev/main=GPU-someone-else")
        row = {"attack": "7: user env / forged device annotations",
               "what": (f"NVIDIA_VISIBLE_DEVICES=all {outcome(env)}; forged annotations "
                        f"{outcome(forged)}, bound by kdra-scheduler: {forged_bound}; patched "
                        f"after binding: {outcome(patched)}"),
               "check": self.check()}
        self.delete(forged_name, victim, *[n for n in self._pods() if n.startswith("env-")])
        row["restart"] = self.restart()
        self.ensure_operator()
        row["fresh pod"] = self.binds("attack 7")
        return row

    def held(self) -> Row:
        h = self.h
        cross = h.create_as_user(pod_body(unique("cross"), h.namespace, [
            {"name": "gpu", "resourceClaimName": f"{h.probes}/theirs"}]))
        dots = h.create_as_user(pod_body(unique("dots"), h.namespace, [
            {"name": "gpu", "resourceClaimName": "../../secrets/x"}]))
        selector = "device.driver == 'gpu.kdra.dev' && " + " && ".join(
            ["device.driver != 'x'"] * 700)
        cel = h.create_as_user({"apiVersion": API, "kind": "ResourceClaim",
                                "metadata": {"name": unique("cel"), "namespace": h.namespace},
                                "spec": {"devices": {"requests": [{
                                    "name": "gpu", "exactly": {
                                        "deviceClassName": GPU_CLASS,
                                        "selectors": [{"cel": {"expression": selector}}]}}]}}})
        self.delete(*self._pods())
        return {"attack": "held: cross-namespace claim, ../ claim name, CEL over 10 KiB",
                "what": f"{outcome(cross)}, {outcome(dots)}, {outcome(cel)}",
                "fresh pod": self.binds("held"), "check": self.check()}

    def _pods(self) -> list[str]:
        out = self.h.plane.kubectl("get", "pods", "-n", self.h.namespace, "-o", "json",
                                   check=False).stdout
        return [p["metadata"]["name"] for p in json.loads(out or '{"items": []}')["items"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="attacks to run (1 2 4 6 7 held)")
    args = parser.parse_args()
    import kdra

    print(f"kdra from {Path(kdra.__file__).parent}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="kdra-hostile-"))
    plane = ControlPlane(work / "plane", binaries()).start()
    crds = Path(__file__).resolve().parents[1] / "crds"
    rows: list[Row] = []
    try:
        plane.kubectl("apply", "--server-side", "-k", str(crds))
        plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                      "-f", str(crds))
        plane.kubectl("create", "namespace", "kdra-system", check=False)
        hostile = Hostile(plane, work)
        hostile.install()
        hostile.start()
        bench = Bench(hostile)
        attacks = {"1": bench.attack1, "2": bench.attack2, "4": bench.attack4,
                   "6": bench.attack6, "7": bench.attack7, "held": bench.held}
        for key, attack in attacks.items():
            if args.only and key not in args.only:
                continue
            print(f"attack {key} ...", file=sys.stderr)
            row = quietly(attack, {"attack": key, "what": "the bench step failed"})
            rows.append(row)
            print("  " + json.dumps(row), file=sys.stderr)
        hostile.stop()
    finally:
        plane.stop()
    keys = ["attack", "what", "effect", "memory", "fresh pod", "restart", "check"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row.get(k, "") for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
