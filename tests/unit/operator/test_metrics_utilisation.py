"""The utilisation gauges (kdra.operator.metrics): what a scrape shows, and the label limits."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import CollectorRegistry, generate_latest

from kdra.dra.allocator import Snapshot
from kdra.dra.models import parse_class, parse_slice
from kdra.operator import metrics
from kdra.operator.utilisation import figures, loop_source
from tests.unit.cli.test_describe import GPU, gpus, raw_claim, raw_slice
from tests.unit.dra.test_utilisation import GPU_CLASS, with_class

FOUND = metrics.Utilisation(
    devices={(GPU, "node-a", GPU, "node-a"): (3, 1, 2, 0),
             (GPU, "node-b", GPU, "node-b"): (2, 0, 1, 0),
             ("", "node-c", "cats.dev", "node-c"): (1, 0, 0, 0)},
    pools={("node-a", GPU, "node-a"): 4, ("node-b", GPU, "node-b"): 2,
           ("node-c", "cats.dev", "node-c"): 1},
    namespaces={("team-a", GPU): 1, ("team-b", GPU): 3, ("team-c", ""): 2})


def scrape(found: metrics.Utilisation | None, limits: metrics.Limits) -> str:
    registry = CollectorRegistry()
    registry.register(metrics.UtilisationCollector(lambda: found, limits))
    return generate_latest(registry).decode()


def test_every_state_of_every_class_node_and_pool_is_a_series() -> None:
    text = scrape(FOUND, metrics.Limits())
    for state, value in (("free", 3), ("allocated", 1), ("blocked", 2), ("unhealthy", 0)):
        assert (f'kdra_devices{{class="{GPU}",driver="{GPU}",node="node-a",pool="node-a",'
                f'state="{state}"}} {value}.0') in text
    assert 'kdra_devices{class="<none>",driver="cats.dev",node="node-c"' in text
    assert f'kdra_pool_devices{{driver="{GPU}",node="node-a",pool="node-a"}} 4.0' in text
    assert 'kdra_namespace_devices_allocated{class="<none>",namespace="team-c"} 2.0' in text


def test_above_the_limits_nodes_and_namespaces_are_summed() -> None:
    text = scrape(FOUND, metrics.Limits(max_nodes=2, max_namespaces=1))
    assert (f'kdra_devices{{class="{GPU}",driver="{GPU}",node="<all>",pool="<all>",'
            'state="free"} 5.0') in text
    assert (f'kdra_devices{{class="{GPU}",driver="{GPU}",node="<all>",pool="<all>",'
            'state="blocked"} 3.0') in text
    assert 'node="node-a"' not in text
    assert f'kdra_pool_devices{{driver="{GPU}",node="<all>",pool="<all>"}} 6.0' in text
    assert f'kdra_namespace_devices_allocated{{class="{GPU}",namespace="team-b"}} 3.0' in text
    assert f'kdra_namespace_devices_allocated{{class="{GPU}",namespace="<all>"}} 1.0' in text
    assert 'kdra_namespace_devices_allocated{class="<none>",namespace="<all>"} 2.0' in text


def test_a_failing_or_empty_source_leaves_the_gauges_out_but_the_scrape_works() -> None:
    assert "kdra_devices{" not in scrape(None, metrics.Limits())

    def broken() -> metrics.Utilisation:
        raise RuntimeError("boom")

    registry = CollectorRegistry()
    registry.register(metrics.UtilisationCollector(broken, metrics.Limits()))
    assert "# TYPE kdra_devices gauge" in generate_latest(registry).decode()


def test_figures_from_the_caches_run_on_the_event_loop() -> None:
    snapshot = Snapshot.build(slices=[parse_slice(raw_slice("node-a", *gpus(2)))],
                              classes=[parse_class(GPU_CLASS)])
    claims = [with_class(raw_claim("c", ("gpu", GPU, "node-a", "gpu-0"), node="node-a",
                                   namespace="team-a"), GPU)]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        source = loop_source(loop, lambda: figures(snapshot, claims))
        found = source()  # from this thread, as the metrics server's would
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert found is not None
    assert found.devices == {(GPU, "node-a", GPU, "node-a"): (1, 1, 0, 0)}
    assert found.pools == {("node-a", GPU, "node-a"): 2}
    assert found.namespaces == {("team-a", GPU): 1}
    assert source() is None  # a closed loop: nothing to report
