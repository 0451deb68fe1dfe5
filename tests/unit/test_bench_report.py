"""bench/report.py's pure parts that the kdra-native contender added: the table of CPU per
bound pod by process (a contender's rounds pooled) and the pair --compare defaults to."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from report import Result, cpu_table, default_compare


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
