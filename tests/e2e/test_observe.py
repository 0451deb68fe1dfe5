"""`python -m kdra_devenv demo`, seen and operated as a user would: ``kubectl kdra free / why /
top`` (kubectl running the plugin from PATH) print the expected tables; a user with little RBAC sees
what they may and is told what they may not; ``promtool check metrics`` passes on the operator's
and the agents' scrapes, each holding only its component's metrics; a real Prometheus
(Debian's ``prometheus``) scrapes the demo's operator and agents, and every panel query of the
Grafana dashboard parses and returns data; the key panels are rendered to a PNG (matplotlib).

The demo runs once for the module (its own control plane, as ``make demo`` with
``DEMO_FLAGS=--flavour kdra``). On top of its five pods the module adds load while
Prometheus scrapes: two pods taking eight H100s each (gpu-node-1 and gpu-node-2 fill up) and
``big``, which wants eight H100s and fits nowhere: gpu-node-0 has five left (train-0..2 hold
three), so it would fit there if three devices were freed; gpu-node-3 has one whole GPU of the
class (its partitions and shared GPU are not).

Prometheus comes from the Debian package (``.ci/run`` installs it): without it the Prometheus
tests are skipped, unless ``KDRA_REQUIRE_PROMETHEUS=1`` (set by ``.ci/run``) makes that a
failure. ``KDRA_DASHBOARD_PNG=docs/dashboard.png`` writes the rendered panels there.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra_devenv.controlplane import free_port
from kdra_devenv.process import spawn, terminate
from tests.e2e.conftest import ROOT
from tests.e2e.demo_helpers import Demo, running_demo
from tests.e2e.procs import wait_for

pytestmark = pytest.mark.slow

DASHBOARD = ROOT / "manifests" / "overlays" / "servicemonitor" / "dashboards" / "kdra.json"
GPU = "gpu.kdra.dev"
PACE = 8.0
"""Seconds between the load's steps (Prometheus scrapes every second)."""
H100 = 'device.attributes["gpu.kdra.dev"].productName.contains("H100")'


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    # The kdra flavour (one flag away from the default native one, which test_demo.py and
    # test_native.py cover): this module's load and views speak kdra's CRDs and annotations.
    yield from running_demo(tmp_path_factory.mktemp("observe"), "--flavour", "kdra")


@dataclass
class Prometheus:
    url: str
    started: float

    def query(self, expr: str) -> dict[str, Any]:
        """The API's answer (status success or error) to an instant query."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=data)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answer: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:  # 400 bad_data: the query does not parse
            answer = json.loads(exc.read())
        return answer

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        params = urllib.parse.urlencode({"query": expr, "start": start, "end": end,
                                         "step": step})
        with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{params}",
                                    timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    if os.environ.get("KDRA_REQUIRE_PROMETHEUS") == "1":
        pytest.fail("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does it "
                "and sets KDRA_REQUIRE_PROMETHEUS=1)")


@pytest.fixture(scope="module")
def prometheus(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port, its own config and data directory, scraping the
    demo's operator and both agents every second."""
    binary = prometheus_binary()
    home = tmp_path_factory.mktemp("prometheus")
    hostport = [urllib.parse.urlparse(url).netloc for url in demo.agent_metrics]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [
                  {"job_name": "kdra-operator", "static_configs": [
                      {"targets": [urllib.parse.urlparse(demo.operator_metrics).netloc]}]},
                  {"job_name": "kdra-agent", "static_configs": [{"targets": hostport}]}]}
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (home / "prometheus.log").open("wb")
    process = spawn(
        [binary, f"--config.file={home / 'prometheus.yml'}",
         f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        run_dir=home, stdout=log, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", time.time())
    try:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return process.poll() is not None  # stop waiting: it died
        wait_for(ready, timeout=60, what="prometheus ready")
        assert process.poll() is None, (home / "prometheus.log").read_text()[-2000:]

        def scraping() -> bool:
            result = prom.query("up")["data"]["result"]
            return len(result) == 4 and all(r["value"][1] == "1" for r in result)
        wait_for(scraping, timeout=60, what="the operator and the three agents scraped")
        yield prom
    finally:
        terminate(process, grace=30)
        log.close()


def gpu_pod(name: str, template: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": {
                CLAIMS_ANNOTATION: yaml.safe_dump([{"name": "gpu",
                                                    "resourceClaimTemplateName": template}])}},
            "spec": {"containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.0-base"}]}}


@pytest.fixture(scope="module")
def loaded(demo: Demo, request: pytest.FixtureRequest) -> Demo:
    """Load on the demo while Prometheus scrapes (when it runs): fill-1 and fill-2 take eight
    H100s each, ``big`` wants eight and fits nowhere."""
    if shutil.which("prometheus"):  # scraping before the load, so the rates see it
        request.getfixturevalue("prometheus")
    template = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "eight-h100", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": GPU, "count": 8,
                    "selectors": [{"cel": {"expression": H100}}]}}]}}}}
    demo.kubectl("apply", "-f", "-", input=json.dumps(template))
    time.sleep(PACE)  # a few scrapes before, between and after the steps: the PNG shows them
    for name in ("fill-1", "fill-2"):
        demo.kubectl("apply", "-f", "-", input=json.dumps(gpu_pod(name, "eight-h100")))
        wait_for(lambda n=name: demo.get("pod", n)["spec"].get("nodeName"), timeout=60,
                 what=f"{name} bound")
        time.sleep(PACE)
    demo.kubectl("apply", "-f", "-", input=json.dumps(gpu_pod("big", "eight-h100")))

    def refused() -> bool:
        conditions = demo.get("pod", "big").get("status", {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)
    wait_for(refused, timeout=60, what="big reported unschedulable")
    return demo


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- kubectl kdra


def test_kubectl_kdra_free(loaded: Demo) -> None:
    result = loaded.kubectl("kdra", "free")
    print(result.stdout)
    assert result.stderr == ""
    table = rows(result.stdout)
    assert table[0] == ["CLASS", "NODE", "POOL", "TOTAL", "ALLOCATED", "FREE", "UNHEALTHY"]
    gpu_rows = [r for r in table if r[0] == GPU and r[1] in {f"gpu-node-{i}" for i in range(3)}]
    # Each node: 8 H100 + 4 A100, the fourth A100 unhealthy — published with the agent's
    # health taint since issue 25 (it used to be left out of the slice: 11 per node).
    assert [(r[1], r[2], r[3]) for r in gpu_rows] == [
        (f"gpu-node-{i}", f"{GPU}/gpu-node-{i}", "12") for i in range(3)]
    # train-0..2, pair-0 (2) and fill-1/fill-2 (8 each): 21 of the 33 healthy ones.
    assert sum(int(r[4]) for r in gpu_rows) == 21
    assert all(int(r[4]) + int(r[5]) == 11 and r[6] == "1" for r in gpu_rows)
    assert ["resource.example.com", "worker-1", "resource-driver.example.com/worker-1", "6",
            "2", "4", "0"] in table
    # gpu-node-3: of its partitioned H100 only the whole GPU is of the class (whole GPUs one
    # claim holds); its 14 partitions and the shared H100 are of no class the demo defines.
    assert [GPU, "gpu-node-3", f"{GPU}/gpu-node-3", "1", "0", "1", "0"] in table
    assert ["-", "gpu-node-3", f"{GPU}/gpu-node-3", "15", "0", "15", "0"] in table
    assert [GPU, "37", "21", "13", "3"] in table  # totals per class
    data = json.loads(loaded.kubectl("kdra", "free", "-o", "json").stdout)
    assert {"class": GPU, "total": 37, "allocated": 21, "free": 13, "unhealthy": 3} in \
        data["classes"]
    assert data["notes"] == []


def test_kubectl_kdra_why(loaded: Demo) -> None:
    result = loaded.kubectl("kdra", "why", "big")
    print(result.stdout)
    text = result.stdout
    claim = loaded.get("pod", "big")["metadata"]["annotations"]
    generated = json.loads(claim["resource.kdra.dev/claim-statuses"])["gpu"]
    assert text.startswith("Pod default/big: 0/5 nodes are available: ")
    assert "kdra-scheduler said: 0/5 nodes are available" in text
    table = text.split("Nodes that cannot take it, by reason:", 1)[1]
    assert re.search(rf'too few free matching devices \(request "gpu" of claim "{generated}" '
                     r"needs 8\)\s+gpu-node-0", table), table
    assert re.search(rf'matching devices all allocated \(request "gpu" of claim "{generated}"\)'
                     r"\s+gpu-node-1, gpu-node-2", table), table
    assert re.search(rf'no device of class "{GPU}" matches request "gpu" of claim '
                     rf'"{generated}".*worker-1', table), table
    assert re.search(rf'too few devices of class "{GPU}" match request "gpu" of claim '
                     rf'"{generated}" \(needs 8\).*gpu-node-3', table), table
    # The claim and its selectors.
    assert re.search(rf"gpu\s+{generated}\s+pending\s+-\s+gpu\s+{GPU}\s+8\s+"
                     rf'class: device.driver == "{GPU}"', text), text
    assert f"request: {H100}" in text
    # The nearest fit: gpu-node-0, once train-0..2 give back their H100s.
    nearest = text.split("Nearest fit, if devices were freed:", 1)[1]
    first = nearest.strip().splitlines()[0]
    assert first.startswith("gpu-node-0 would fit if 3 devices were freed: ")
    for pod in ("train-0", "train-1", "train-2"):
        assert re.search(rf"default/{pod}-gpu-\w+ \(pod {pod}\)", first), first
    data = json.loads(loaded.kubectl("kdra", "why", "big", "-o", "json").stdout)
    assert data["verdict"] == "unschedulable"
    assert data["nearest"][0]["node"] == "gpu-node-0" and data["nearest"][0]["free"] == 3


def test_kubectl_kdra_top(loaded: Demo) -> None:
    result = loaded.kubectl("kdra", "top")
    print(result.stdout)
    table = rows(result.stdout)
    assert table[0] == ["NAMESPACE", "DEVICES", "CLAIMS", "PENDING", "BY", "CLASS"]
    # 21 GPUs and 2 cats; 8 allocated claims (3 train, pair, 2 fill, 2 cats), big's pending.
    assert table[1] == ["default", "23", "8", "1", f"{GPU}=21,", "resource.example.com=2"]
    pods = {r[1]: (r[2], r[3]) for r in table if r[0] == "default" and len(r) == 4}
    assert pods["fill-1"][0] == pods["fill-2"][0] == "8"
    assert pods["pair-0"][0] == "2" and pods["pod-with-cats"][0] == "2"
    assert pods["train-0"][0] == "1"
    assert "small-white-cat-claim" in pods["pod-with-cats"][1]


def test_describe_and_check_from_the_users_kubeconfig(loaded: Demo) -> None:
    described = loaded.kubectl("kdra", "describe", "--summary").stdout
    # 12 devices, one tainted unhealthy (issue 25): 5 allocated, 6 free to take.
    assert re.search(r"^gpu-node-0\s+gpu.kdra.dev\s+gpu-node-0\s+\d+\s+12\s+5\s+6$",
                     described, re.M), described
    check = loaded.kubectl("kdra", "check", check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 violation(s)" in check.stderr


def test_a_user_with_little_rbac_is_told_what_could_not_be_read(loaded: Demo) -> None:
    """alice has the default ``view`` role in default (kdra's kdra-user-view, from
    manifests/base, aggregated into it: claims and templates) and may list the cluster's
    slices and classes (the user guide's kdra-devices-viewer), not nodes nor other namespaces'
    claims; nobody may read nothing."""
    rbac = [  # the demo installed kdra-user-view (manifests/base/user-roles.yaml)
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-view", "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "view"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": "alice"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "kdra-devices-viewer"},
         "rules": [{"apiGroups": ["resource.kdra.dev"],
                    "resources": ["resourceslices", "deviceclasses"],
                    "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "alice-kdra-devices-viewer"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "kdra-devices-viewer"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": "alice"}]},
    ]
    loaded.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in rbac))
    # kube-controller-manager aggregates kdra-user-view into view (asynchronously).
    wait_for(lambda: loaded.kubectl("auth", "can-i", "list", "resourceclaims.resource.kdra.dev",
                                    "-n", "default", "--as", "alice",
                                    check=False).stdout.strip() == "yes",
             timeout=60, what="kdra-user-view aggregated into view")
    free = loaded.kubectl("kdra", "free", "--as", "alice")
    assert "could not read ResourceClaims in all namespaces: 403 Forbidden" in free.stderr
    assert "only namespace default's claims are counted" in free.stderr
    assert [GPU, "37", "21", "13", "3"] in rows(free.stdout)  # every claim is in default

    why = loaded.kubectl("kdra", "why", "big", "--as", "alice")
    assert "could not read nodes (cluster-wide): 403 Forbidden" in why.stderr, why.stderr
    assert "nodes could not be read: taints, node selectors and capacity are not checked" \
        in why.stderr
    assert "Pod default/big: 0/5 nodes are available" in why.stdout  # nodes from the slices
    assert "gpu-node-0 would fit if 3 devices were freed" in why.stdout

    nobody = loaded.kubectl("kdra", "free", "--as", "nobody", check=False)
    assert nobody.returncode == 1
    assert "could not read ResourceSlices (cluster-wide): 403 Forbidden" in nobody.stderr
    assert nobody.stdout == ""


def test_flags_anywhere_pod_slash_name_and_clear_errors(loaded: Demo) -> None:
    """kubectl's habits: flags before the command, ``pod/NAME``, ``free -n``; an unknown class
    is an error (exit 1) and a user who may read the pod but not its claims is told so, not
    that the pod waits for them."""
    why = loaded.kubectl("kdra", "-n", "default", "why", "pod/big")
    assert "Pod default/big: 0/5 nodes are available" in why.stdout, why.stdout + why.stderr
    free = loaded.kubectl("kdra", "-n", "default", "free")
    assert [GPU, "37", "21", "13", "3"] in rows(free.stdout)
    assert free.stdout == loaded.kubectl("kdra", "free", "-n", "default").stdout

    nosuch = loaded.kubectl("kdra", "free", "--class", "nosuch", check=False)
    assert nosuch.returncode == 1 and nosuch.stdout == ""
    assert (f"kubectl kdra free: DeviceClass 'nosuch' not found (DeviceClasses: {GPU}"
            in nosuch.stderr), nosuch.stderr
    deployment = loaded.kubectl("kdra", "why", "deployment/big", check=False)
    assert deployment.returncode == 2
    assert "'deployment/big': why explains a pod: give POD or pod/POD" in deployment.stderr

    rbac = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "pod-reader", "namespace": "default"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "carol-pod-reader", "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "pod-reader"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": "carol"}]},
    ]
    loaded.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in rbac))
    carol = loaded.kubectl("kdra", "why", "big", "--as", "carol", check=False)
    assert carol.returncode == 1, carol.stdout + carol.stderr
    assert ("kubectl kdra why: could not read ResourceClaims in namespace default: "
            "403 Forbidden") in carol.stderr, carol.stderr
    assert "waiting for its claims" not in carol.stdout + carol.stderr


# --------------------------------------------------------------------------- scrapes


def promtool_binary() -> str:
    found = shutil.which("promtool")  # Debian's prometheus package ships it
    if found:
        return found
    if os.environ.get("KDRA_REQUIRE_PROMETHEUS") == "1":
        pytest.fail("promtool is not installed (apt-get install prometheus; .ci/run does)")
    pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does it "
                "and sets KDRA_REQUIRE_PROMETHEUS=1)")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_each_scrape_follows_prometheus_conventions_and_holds_its_own_metrics(
        loaded: Demo) -> None:
    """``promtool check metrics`` finds nothing on the operator's scrape nor an agent's (e.g.
    no gauge named ``_total``), with every family present after the load; the operator's
    carries no ``kdra_agent_*`` family and an agent's no ``kdra_scheduler_*`` one."""
    promtool = promtool_binary()
    operator = scrape(loaded.operator_metrics)
    agents = [scrape(url) for url in loaded.agent_metrics]
    for name, text in (("operator", operator), *(("agent", t) for t in agents)):
        checked = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                                 capture_output=True, timeout=60)
        assert (checked.returncode, checked.stdout + checked.stderr) == (0, ""), name
        assert all(f.startswith(("kdra_", "python_", "process_")) for f in families(text))
    operator_families = families(operator)
    assert {"kdra_devices", "kdra_pool_devices", "kdra_scheduler_pending_pods"} \
        <= operator_families
    assert "kdra_pool_devices_total" not in operator_families  # renamed: a gauge
    assert not {f for f in operator_families if f.startswith("kdra_agent_")}
    for text in agents:
        assert "kdra_agent_prepared_claims" in families(text)
        assert not {f for f in families(text)
                    if f.startswith(("kdra_scheduler_", "kdra_resourceclaim_", "kdra_devices",
                                     "kdra_pool_", "kdra_namespace_"))}


# --------------------------------------------------------------------------- dashboard


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel, Grafana's variables as Grafana would fill them
    in: every class, and a 10-minute rate window (as ``$__rate_interval`` is over a day's
    range): it covers the load the module made since Prometheus started."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"].replace("$class", ".*").replace("$__rate_interval", "10m")
            assert "$" not in expr, expr
            found.append((panel["title"], expr))
    return found


def test_every_dashboard_query_parses_and_returns_data(prometheus: Prometheus,
                                                       loaded: Demo) -> None:
    queries = panel_queries()
    assert len(queries) >= 18
    missing: dict[str, Any] = {}

    def all_answered() -> bool:
        missing.clear()
        for title, expr in queries:
            answer = prometheus.query(expr)
            assert answer["status"] == "success", (title, expr, answer)  # it parses
            values = [float(r["value"][1]) for r in answer["data"]["result"]]
            if not values or all(math.isnan(v) for v in values):
                missing[title] = (expr, answer["data"]["result"])
        return not missing

    wait_for(all_answered, timeout=90, interval=2, what="every panel with data")
    assert not missing, missing
    # The figures are the cluster's: 21 of 34 GPUs allocated, 2 of 6 cats; gpu-node-3's
    # partitions and shared GPU are of no class.
    allocated = prometheus.query(f'sum(kdra_devices{{class="{GPU}",state="allocated"}})')
    assert float(allocated["data"]["result"][0]["value"][1]) == 21.0
    free = prometheus.query('sum by (class) (kdra_devices{state="free"})')["data"]["result"]
    assert {r["metric"]["class"]: float(r["value"][1]) for r in free} == {
        GPU: 13.0, "resource.example.com": 4.0, "<none>": 15.0}
    pending = prometheus.query("sum(kdra_scheduler_pending_pods)")["data"]["result"]
    assert float(pending[0]["value"][1]) == 1.0  # big
    reasons = {r["metric"]["reason"]: float(r["value"][1]) for r in prometheus.query(
        "kdra_scheduler_unschedulable_reasons_total")["data"]["result"]}
    assert reasons["devices-busy"] > 0 and reasons["no-matching-device"] > 0
    assert reasons["other"] == 0  # the allocator's rejections count once, by their code
    bad = prometheus.query("sum(kdra_devices{state=}")
    assert bad["status"] == "error" and bad["errorType"] == "bad_data"  # parsing is checked


KEY_PANELS = ("Devices by state", "Free devices per node", "Devices allocated per namespace",
              "Why nodes were rejected (per second)", "Scheduling latency (pod created → bound)",
              "Agent prepare latency")


def test_key_panels_render_to_a_png(prometheus: Prometheus, loaded: Demo,
                                    tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    queries: dict[str, list[tuple[str, str]]] = {}
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        if panel["title"] in KEY_PANELS:
            queries[panel["title"]] = [  # rates over 30 s: the steps show as they happened
                (t["expr"].replace("$class", ".*").replace("$__rate_interval", "30s"),
                 t.get("legendFormat", "")) for t in panel["targets"]]
    assert sorted(queries) == sorted(KEY_PANELS)
    start = prometheus.started
    end = time.time() + PACE
    time.sleep(PACE)  # a flat tail after the last step
    figure, axes = pyplot.subplots(2, 3, figsize=(16, 8))
    plotted = 0
    for axis, title in zip(axes.flat, KEY_PANELS, strict=True):
        for expr, legend in queries[title]:
            for series in prometheus.query_range(expr, start, end, 1):
                times = [float(t) - start for t, _ in series["values"]]
                values = [float(v) for _, v in series["values"]]
                if not any(values):
                    continue  # e.g. one of the 15 rejection reasons that never happened
                label = re.sub(r"\{\{(\w+)\}\}",
                               lambda m, s=series: str(s["metric"].get(m.group(1), "")),
                               legend) or expr[:30]
                axis.plot(times, values, label=label)
                plotted += 1
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("seconds since Prometheus started")
        axis.legend(fontsize=7, loc="upper left")
        axis.grid(alpha=0.3)
    figure.suptitle("kdra dashboard — key panels, from Prometheus scraping `make demo`")
    figure.tight_layout()
    png = tmp_path / "dashboard.png"
    figure.savefig(png, dpi=80)
    pyplot.close(figure)
    assert plotted >= len(KEY_PANELS)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    target = os.environ.get("KDRA_DASHBOARD_PNG")
    if target:
        shutil.copyfile(png, ROOT / target if not os.path.isabs(target) else target)


def test_the_guides_extended_and_all_a100_examples_run_on_the_demo(loaded: Demo) -> None:
    """manifests/examples/extended as the user guide says: a Deployment asking for
    ``gpu.kdra.dev/gpu: 2`` — the demo runs the Deployment and ReplicaSet controllers and
    defines the GPUs' class as the examples do (with its extendedResourceName), so its pod
    gets a claim of two GPUs and is bound; then all-a100 (allocationMode All). Last in the
    module: it changes the counts."""
    loaded.kubectl("apply", "-k", str(ROOT / "manifests" / "examples" / "extended"))

    def bound() -> dict[str, Any] | None:
        pods = loaded.get("pods", "-l", "app=train-gpus")["items"]
        return pods[0] if pods and pods[0]["spec"].get("nodeName") else None
    pod = wait_for(bound, timeout=90, what="the Deployment's pod bound")
    assert pod is not None
    claims = [c for c in loaded.get(
        "resourceclaims.resource.kdra.dev")["items"]
        if any(r.get("name") == pod["metadata"]["name"]
               for r in (c.get("status") or {}).get("reservedFor") or [])]
    assert len(claims) == 1
    results = claims[0]["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["driver"] for r in results} == {GPU}
    # allocationMode All (manifests/examples/gpu/all-a100.yaml): every A100 of a node. The
    # demo's inventory reports an H200 unhealthy, not an A100, or All could never be met.
    loaded.kubectl("apply", "-f", str(ROOT / "manifests" / "examples" / "gpu" / "all-a100.yaml"))
    wait_for(lambda: loaded.get("pod", "all-a100-pod")["spec"].get("nodeName"), timeout=90,
             what="all-a100-pod bound")
