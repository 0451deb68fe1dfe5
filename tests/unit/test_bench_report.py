"""bench/report.py's pure parts that the kdra-native contender added: the table of CPU per
bound pod by process (a contender's rounds pooled) and the pair --compare defaults to; and the
API server's counts the benchmark reads (bench/kapi.py) with the watch table made of them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from kapi import server_counts
from report import Result, cpu_table, default_compare, watch_table


def test_cpu_per_pod_by_process_pools_the_rounds() -> None:
    results = [
        Result("template", "kdra-native", pods=500, cpu=2.0, round=1,
               extra={"cpu_kdra-operator": 2.0, "cpu_kube-apiserver": 5.0, "cpu_etcd": 1.0,
                      "cpu_kube-controller-manager": 0.5}),
        Result("template", "kdra-native", pods=500, cpu=3.0, round=2,
               extra={"cpu_kdra-operator": 3.0, "cpu_kube-apiserver": 6.0, "cpu_etcd": 1.0,
                      "cpu_kube-controller-manager": 0.5}),
        Result("template", "upstream", pods=250, cpu=2.0,
               extra={"cpu_kube-scheduler": 1.5, "cpu_kube-controller-manager": 0.5,
                      "cpu_kube-apiserver": 3.0, "cpu_etcd": 0.5}),
        Result("template", "kdra", pods=0, cpu=1.0),  # nothing bound: no row
    ]
    header, _, native, upstream = cpu_table(results).splitlines()
    # The contenders' processes first, the API server and etcd (everyone's) last.
    assert header == ("| workload | contender | counted | kdra-operator | "
                      "kube-controller-manager | kube-scheduler | etcd | kube-apiserver |")
    # Pooled: 5 s over 1,000 pods is 5 ms per pod; a process a contender lacks is "-".
    assert native == "| template | kdra-native | 5.00 | 5.00 | 1.00 | - | 2.00 | 11.00 |"
    assert upstream == "| template | upstream | 8.00 | - | 2.00 | 6.00 | 2.00 | 12.00 |"
    assert cpu_table([Result("template", "kdra", pods=10, cpu=1.0)]) == ""


def test_compare_defaults_to_kdra_native_only_without_kdra() -> None:
    assert default_compare(["kdra", "upstream"]) == ("kdra", "upstream")
    assert default_compare(["kdra-native", "upstream"]) == ("kdra-native", "upstream")
    assert default_compare(["kdra", "kdra-native", "upstream"]) == ("kdra", "upstream")
    assert default_compare(["upstream"]) == ("kdra", "upstream")


METRICS = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 7
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 90
apiserver_request_total{code="200",resource="resourceclaims",subresource="status",verb="PUT"} 4
apiserver_request_total{code="409",resource="resourceclaims",subresource="status",verb="PUT"} 1
apiserver_watch_events_total{group="",kind="Pod",resource="pods",version="v1"} 20
apiserver_watch_events_total{kind="ResourceClaim",resource="resourceclaims"} 10
apiserver_watch_events_sizes_bucket{group="",resource="pods",version="v1",le="1024"} 3
apiserver_watch_events_sizes_sum{group="",kind="Pod",resource="pods",version="v1"} 40000
apiserver_watch_events_sizes_sum{kind="ResourceClaim",resource="resourceclaims"} 27080
apiserver_watch_events_sizes_count{group="",kind="Pod",resource="pods",version="v1"} 20
"""


def test_server_counts_reads_writes_and_watch_traffic_and_nothing_else() -> None:
    writes, watch = server_counts(METRICS)
    # GETs are not writes; answer codes are summed per verb and resource.
    assert writes == {"POST pods": 7, "PUT resourceclaims/status": 5}
    # Buckets and counts of the size histogram are not the sum.
    assert watch == {"events pods": 20, "events resourceclaims": 10,
                     "bytes pods": 40000, "bytes resourceclaims": 27080}


def test_watch_table_per_bound_pod_pools_the_rounds() -> None:
    _, watch = server_counts(METRICS)
    results = [Result("steady-empty", "kdra", pods=5, round=1, watch=dict(watch)),
               Result("steady-empty", "kdra", pods=5, round=2, watch=dict(watch)),
               Result("steady-empty", "upstream", pods=0, watch=dict(watch))]  # no row
    header, _, pods, claims = watch_table(results).splitlines()
    assert header == "| workload | contender | resource | events/pod | bytes/event | KB/pod |"
    # 40 pod events over 10 pods: 4 per pod, 2,000 bytes each, 7.8 KiB per pod.
    assert pods == "| steady-empty | kdra | pods | 4.00 | 2000 | 7.8 |"
    assert claims == "| steady-empty | kdra | resourceclaims | 2.00 | 2708 | 5.3 |"
    assert watch_table([Result("steady-empty", "kdra", pods=5)]) == ""
