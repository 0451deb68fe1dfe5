"""The tables of the re-cut by program (issue 37), read by hack/recut.py: where every module of
``operator/kdra`` and of ``tests/unit`` goes, and how the modules split by hand were split.

Invariants:
- Every old module of the tree before the re-cut is a key of :data:`MAPPING`, a dissolved
  package (:data:`DISSOLVED`) or inside a kept tree (:data:`KEPT`); ``hack/recut.py --check``
  lists any other.
- A package maps to a package and a module to a module; no two old modules share a new path.
"""

from __future__ import annotations

# Source roots: a module's top-level package -> the directory its package lives in.
SOURCE_ROOTS = {"kdra": "operator", "kdra_devenv": "devenv", "tests": "."}

MAPPING: dict[str, str] = {
    # ---- top level
    "kdra.cli": "kdra.main",
    "kdra.plugin": "kdra.cli.kubectl",
    "kdra.settings": "kdra.operator.settings",
    "kdra.loops": "kdra.kube.loops",
    "kdra.memory": "kdra.kube.memory",
    "kdra.pki": "kdra.operator.webhooks.pki",
    "kdra.demo": "kdra_devenv.demo",
    "kdra.demo_node": "kdra_devenv.demo_node",
    # ---- devenv: dev-only, outside the product
    "kdra.devenv": "kdra_devenv",
    "kdra.devenv.containerd": "kdra_devenv.containerd",
    "kdra.devenv.controlplane": "kdra_devenv.controlplane",
    "kdra.devenv.hostledger": "kdra_devenv.hostledger",
    "kdra.devenv.imagebuild": "kdra_devenv.imagebuild",
    "kdra.devenv.images": "kdra_devenv.images",
    "kdra.devenv.node": "kdra_devenv.node",
    "kdra.devenv.nodecmd": "kdra_devenv.nodecmd",
    "kdra.devenv.pki": "kdra_devenv.pki",
    "kdra.devenv.process": "kdra_devenv.process",
    "kdra.devenv.realcluster": "kdra_devenv.realcluster",
    # ---- domain/: dissolved into the programs' cores, kube's core and the DRA core
    "kdra.domain.admission": "kdra.operator.core.admission",
    "kdra.domain.admission_objects": "kdra.operator.core.admission_objects",
    "kdra.domain.admission_env": "kdra.operator.core.admission_env",
    "kdra.domain.agent_leases": "kdra.kube.core.agent_leases",
    "kdra.domain.backoff": "kdra.kube.core.backoff",
    "kdra.domain.bindings": "kdra.operator.core.bindings",
    "kdra.domain.binding_conditions": "kdra.dra.binding_conditions",
    "kdra.domain.cdi": "kdra.agent.core.cdi",
    "kdra.domain.checkpoint": "kdra.agent.core.checkpoint",
    "kdra.domain.conversion_review": "kdra.operator.core.conversion_review",
    "kdra.domain.describe": "kdra.cli.core.describe",
    "kdra.domain.describe_gpus": "kdra.cli.core.describe_gpus",
    "kdra.domain.eviction": "kdra.operator.core.eviction",
    "kdra.domain.exposure": "kdra.agent.core.exposure",
    "kdra.domain.extended": "kdra.operator.core.extended",
    "kdra.domain.extended_entry": "kdra.kube.core.extended_entry",
    "kdra.domain.forged": "kdra.cli.core.forged",
    "kdra.domain.gpu_modes": "kdra.agent.core.gpu_modes",
    "kdra.domain.gpu_partitions": "kdra.agent.core.gpu_partitions",
    "kdra.domain.gpu_profiles": "kdra.agent.core.gpu_profiles",
    "kdra.domain.health": "kdra.agent.core.health",
    "kdra.domain.invariants": "kdra.cli.core.invariants",
    "kdra.domain.invariants_shared": "kdra.cli.core.invariants_shared",
    "kdra.domain.inventory": "kdra.agent.core.inventory",
    "kdra.domain.inventory_devices": "kdra.agent.core.inventory_devices",
    "kdra.domain.jsonscan": "kdra.kube.core.jsonscan",
    "kdra.domain.node_accounting": "kdra.agent.core.node_accounting",
    "kdra.domain.nodeprep": "kdra.agent.core.nodeprep",
    "kdra.domain.partition_slices": "tests.unit.partition_slices",  # for tests and benchmarks
    "kdra.domain.podclaims": "kdra.kube.core.podclaims",
    "kdra.domain.pool_layout": "kdra.agent.core.pool_layout",
    "kdra.domain.pool_ownership": "kdra.kube.core.pool_ownership",
    "kdra.domain.preemption": "kdra.operator.core.preemption",
    "kdra.domain.printable": "kdra.kube.core.printable",
    "kdra.domain.publication": "kdra.agent.core.publication",
    "kdra.domain.quota": "kdra.operator.core.quota",
    "kdra.domain.quota_admission": "kdra.operator.core.quota_admission",
    "kdra.domain.scheduling": "kdra.dra.scheduling",
    "kdra.domain.shares": "kdra.agent.core.shares",
    "kdra.domain.tables": "kdra.cli.core.tables",
    "kdra.domain.untrusted": "kdra.kube.core.untrusted",
    "kdra.domain.utilisation": "kdra.dra.usage.utilisation",
    "kdra.domain.webhooks": "kdra.operator.core.webhook_configs",
    "kdra.domain.why": "kdra.cli.core.why",
    # ---- handlers/: the kopf handlers stay the operator's; the CLI's commands go to the CLI
    "kdra.handlers": "kdra.operator.handlers",
    "kdra.handlers.operator": "kdra.operator.handlers.routes",
    "kdra.handlers.webhooks": "kdra.operator.webhooks.process",
    "kdra.handlers.check": "kdra.cli.check",
    "kdra.handlers.plugin": "kdra.cli.kubectl_commands",
    "kdra.handlers.readers": "kdra.kube.readers",
    # ---- metrics/: each program its own; serving and the watch metrics in kube
    "kdra.metrics.agent": "kdra.agent.metrics",
    "kdra.metrics.binder": "kdra.operator.metrics.binder",
    "kdra.metrics.operator": "kdra.operator.metrics.controllers",
    "kdra.metrics.utilisation": "kdra.operator.metrics.utilisation",
    "kdra.metrics.serving": "kdra.kube.metrics.serving",
    "kdra.metrics.watches": "kdra.kube.metrics.watches",
    # ---- services/: the operator's rooms, the agent, and the shared Kubernetes machinery
    "kdra.services.agent": "kdra.agent",
    "kdra.services.agent.cdi": "kdra.agent.cdi",
    "kdra.services.agent.checkpoint": "kdra.agent.checkpoint",
    "kdra.services.agent.discovery": "kdra.agent.backends.nvml",
    "kdra.services.agent.exposure": "kdra.agent.exposure",
    "kdra.services.agent.health": "kdra.agent.health",
    "kdra.services.agent.heartbeat": "kdra.agent.heartbeat",
    "kdra.services.agent.node": "kdra.agent.node",
    "kdra.services.agent.node_health": "kdra.agent.node_health",
    "kdra.services.agent.nri": "kdra.agent.nri",
    "kdra.services.agent.nri.messages": "kdra.agent.nri.messages",
    "kdra.services.agent.nri.plugin": "kdra.agent.nri.plugin",
    "kdra.services.agent.nri.session": "kdra.agent.nri.session",
    "kdra.services.agent.nri.wire": "kdra.agent.nri.wire",
    "kdra.services.agent.nvml_health": "kdra.agent.backends.nvml_health",
    "kdra.services.agent.nvml_mig": "kdra.agent.backends.nvml_mig",
    "kdra.services.agent.prepare": "kdra.agent.prepare",
    "kdra.services.agent.process": "kdra.agent.process",
    "kdra.services.agent.publisher": "kdra.agent.publisher",
    "kdra.services.agent.runner": "kdra.agent.runner",
    "kdra.services.binder": "kdra.operator.scheduler",
    "kdra.services.binder.cluster": "kdra.operator.scheduler.cluster",
    "kdra.services.binder.loop": "kdra.operator.scheduler.loop",
    "kdra.services.binder.pending": "kdra.operator.scheduler.pending",
    "kdra.services.binder.prepare": "kdra.operator.scheduler.prepare",
    "kdra.services.binder.reporting": "kdra.operator.scheduler.reporting",
    "kdra.services.binder.settings": "kdra.operator.scheduler.settings",
    "kdra.services.binder.writes": "kdra.operator.scheduler.writes",
    "kdra.services.preemption": "kdra.operator.scheduler.preemption",
    "kdra.services.quota": "kdra.operator.scheduler.quota",
    "kdra.services.searches": "kdra.operator.scheduler.searches",
    "kdra.services.claim_controller": "kdra.operator.claim_controller",
    "kdra.services.claim_births": "kdra.operator.core.claim_births",
    "kdra.services.operator": "kdra.operator.composition",
    "kdra.services.slice_gc": "kdra.operator.slice_gc",
    "kdra.services.taint_eviction": "kdra.operator.taint_eviction",
    "kdra.services.utilisation": "kdra.operator.utilisation",
    "kdra.services.webhook": "kdra.operator.webhooks.server",
    "kdra.services.webhook_maintenance": "kdra.operator.webhooks.maintenance",
    "kdra.services.webhook_intake": "kdra.kube.webhook_intake",
    "kdra.services.conversion": "kdra.operator.webhooks.conversion",
    "kdra.services.certs": "kdra.operator.webhooks.certs",
    "kdra.services.extended_lookup": "kdra.operator.webhooks.extended_lookup",
    "kdra.services.gpu_lookup": "kdra.operator.webhooks.gpu_lookup",
    "kdra.services.informer": "kdra.kube.informer",
    "kdra.services.leader": "kdra.kube.leader",
    "kdra.services.store": "kdra.kube.store",
    "kdra.services.workqueue": "kdra.kube.workqueue",
    # ---- unit tests: tests/unit mirrors the packages
    "tests.unit.domain.admission_helpers": "tests.unit.operator.admission_helpers",
    "tests.unit.domain.upstream_cases": "tests.unit.dra.upstream_cases",
    "tests.unit.domain.upstream_table": "tests.unit.dra.upstream_table",
    "tests.unit.domain.conversion_strategies": "tests.unit.dra.conversion_strategies",
    "tests.unit.domain.test_admission_claims": "tests.unit.operator.test_admission_claims",
    "tests.unit.domain.test_admission_env": "tests.unit.operator.test_admission_env",
    "tests.unit.domain.test_admission_pods": "tests.unit.operator.test_admission_pods",
    "tests.unit.domain.test_allocator": "tests.unit.dra.test_allocator",
    "tests.unit.domain.test_allocator_accounting_property":
        "tests.unit.dra.test_allocator_accounting_property",
    "tests.unit.domain.test_allocator_budget": "tests.unit.dra.test_allocator_budget",
    "tests.unit.domain.test_allocator_cluster": "tests.unit.dra.test_allocator_cluster",
    "tests.unit.domain.test_allocator_issue39": "tests.unit.dra.test_allocator_issue39",
    "tests.unit.domain.test_allocator_issue39_properties":
        "tests.unit.dra.test_allocator_issue39_properties",
    "tests.unit.domain.test_allocator_nodeselector": "tests.unit.dra.test_allocator_nodeselector",
    "tests.unit.domain.test_allocator_partitions": "tests.unit.dra.test_allocator_partitions",
    "tests.unit.domain.test_allocator_prioritized": "tests.unit.dra.test_allocator_prioritized",
    "tests.unit.domain.test_allocator_results": "tests.unit.dra.test_allocator_results",
    "tests.unit.domain.test_allocator_search_property":
        "tests.unit.dra.test_allocator_search_property",
    "tests.unit.domain.test_allocator_snapshot": "tests.unit.dra.test_allocator_snapshot",
    "tests.unit.domain.test_allocator_taints": "tests.unit.dra.test_allocator_taints",
    "tests.unit.domain.test_allocator_unknown_devices":
        "tests.unit.dra.test_allocator_unknown_devices",
    "tests.unit.domain.test_allocator_upstream_table":
        "tests.unit.dra.test_allocator_upstream_table",
    "tests.unit.domain.test_backoff": "tests.unit.kube.test_backoff",
    "tests.unit.domain.test_bindings": "tests.unit.operator.test_bindings",
    "tests.unit.domain.test_cel": "tests.unit.dra.test_cel",
    "tests.unit.domain.test_cel_bombs": "tests.unit.dra.test_cel_bombs",
    "tests.unit.domain.test_cel_cost": "tests.unit.dra.test_cel_cost",
    "tests.unit.domain.test_cel_env": "tests.unit.dra.test_cel_env",
    "tests.unit.domain.test_cel_libs": "tests.unit.dra.test_cel_libs",
    "tests.unit.domain.test_cel_types": "tests.unit.dra.test_cel_types",
    "tests.unit.domain.test_conversion": "tests.unit.dra.test_conversion",
    "tests.unit.domain.test_conversion_review": "tests.unit.operator.test_conversion_review",
    "tests.unit.domain.test_describe": "tests.unit.cli.test_describe",
    "tests.unit.domain.test_describe_gpus": "tests.unit.cli.test_describe_gpus",
    "tests.unit.domain.test_device_statuses": "tests.unit.operator.test_device_statuses",
    "tests.unit.domain.test_eviction": "tests.unit.operator.test_eviction",
    "tests.unit.domain.test_exposure": "tests.unit.agent.test_exposure",
    "tests.unit.domain.test_extended": "tests.unit.operator.test_extended",
    "tests.unit.domain.test_fuzz": "tests.unit.dra.test_fuzz",
    "tests.unit.domain.test_gpu_modes": "tests.unit.agent.test_gpu_modes",
    "tests.unit.domain.test_gpu_partitions": "tests.unit.agent.test_gpu_partitions",
    "tests.unit.domain.test_health": "tests.unit.agent.test_health",
    "tests.unit.domain.test_invariants": "tests.unit.cli.test_invariants",
    "tests.unit.domain.test_inventory": "tests.unit.agent.test_inventory",
    "tests.unit.domain.test_models": "tests.unit.dra.test_models",
    "tests.unit.domain.test_nodeprep": "tests.unit.agent.test_nodeprep",
    "tests.unit.domain.test_podclaims": "tests.unit.kube.test_podclaims",
    "tests.unit.domain.test_preemption": "tests.unit.operator.test_preemption",
    "tests.unit.domain.test_printable": "tests.unit.kube.test_printable",
    "tests.unit.domain.test_quantity": "tests.unit.dra.test_quantity",
    "tests.unit.domain.test_quota": "tests.unit.operator.test_quota",
    "tests.unit.domain.test_scheduling": "tests.unit.dra.test_scheduling",
    "tests.unit.domain.test_semver": "tests.unit.dra.test_semver",
    "tests.unit.domain.test_taints": "tests.unit.dra.test_taints",
    "tests.unit.domain.test_untrusted": "tests.unit.kube.test_untrusted",
    "tests.unit.domain.test_utilisation": "tests.unit.dra.test_utilisation",
    "tests.unit.domain.test_webhooks": "tests.unit.operator.test_webhooks",
    "tests.unit.domain.test_why": "tests.unit.cli.test_why",
    "tests.unit.handlers.test_check_exit": "tests.unit.cli.test_check_exit",
    "tests.unit.handlers.test_watch_routes": "tests.unit.operator.test_watch_routes",
    "tests.unit.handlers.test_webhooks_command": "tests.unit.operator.test_webhooks_command",
    "tests.unit.services.agent_prepare_helpers": "tests.unit.agent.prepare_helpers",
    "tests.unit.services.binder_objects": "tests.unit.operator.binder_objects",
    "tests.unit.services.hot_path_workload": "tests.unit.operator.hot_path_workload",
    "tests.unit.services.nri_runtime": "tests.unit.agent.nri_runtime",
    "tests.unit.services.test_agent_exposure": "tests.unit.agent.test_agent_exposure",
    "tests.unit.services.test_agent_health": "tests.unit.agent.test_agent_health",
    "tests.unit.services.test_agent_prepare_checkpoint":
        "tests.unit.agent.test_agent_prepare_checkpoint",
    "tests.unit.services.test_agent_prepare_lifecycle":
        "tests.unit.agent.test_agent_prepare_lifecycle",
    "tests.unit.services.test_agent_prepare_shares": "tests.unit.agent.test_agent_prepare_shares",
    "tests.unit.services.test_agent_publisher": "tests.unit.agent.test_agent_publisher",
    "tests.unit.services.test_agent_runner": "tests.unit.agent.test_agent_runner",
    "tests.unit.services.test_binder_binding_conditions":
        "tests.unit.operator.test_binder_binding_conditions",
    "tests.unit.services.test_binder_pools_across_nodes":
        "tests.unit.operator.test_binder_pools_across_nodes",
    "tests.unit.services.test_binder_preemption": "tests.unit.operator.test_binder_preemption",
    "tests.unit.services.test_binder_quota": "tests.unit.operator.test_binder_quota",
    "tests.unit.services.test_binder_release": "tests.unit.operator.test_binder_release",
    "tests.unit.services.test_binder_retry": "tests.unit.operator.test_binder_retry",
    "tests.unit.services.test_binder_search_budget":
        "tests.unit.operator.test_binder_search_budget",
    "tests.unit.services.test_binder_two_writers": "tests.unit.operator.test_binder_two_writers",
    "tests.unit.services.test_certs": "tests.unit.operator.test_certs",
    "tests.unit.services.test_checkpoint": "tests.unit.agent.test_checkpoint",
    "tests.unit.services.test_claim_controller_names":
        "tests.unit.operator.test_claim_controller_names",
    "tests.unit.services.test_claim_storm": "tests.unit.operator.test_claim_storm",
    "tests.unit.services.test_discovery_nvml": "tests.unit.agent.test_discovery_nvml",
    "tests.unit.services.test_extended_services": "tests.unit.operator.test_extended_services",
    "tests.unit.services.test_gpu_lookup": "tests.unit.operator.test_gpu_lookup",
    "tests.unit.services.test_hostile_objects": "tests.unit.operator.test_hostile_objects",
    "tests.unit.services.test_hot_path_counts": "tests.unit.operator.test_hot_path_counts",
    "tests.unit.services.test_informer": "tests.unit.kube.test_informer",
    "tests.unit.services.test_leader": "tests.unit.kube.test_leader",
    "tests.unit.services.test_nri_messages": "tests.unit.agent.test_nri_messages",
    "tests.unit.services.test_nri_plugin": "tests.unit.agent.test_nri_plugin",
    "tests.unit.services.test_nri_wire": "tests.unit.agent.test_nri_wire",
    "tests.unit.services.test_pool_ownership": "tests.unit.operator.test_pool_ownership",
    "tests.unit.services.test_slice_gc": "tests.unit.operator.test_slice_gc",
    "tests.unit.services.test_store": "tests.unit.kube.test_store",
    "tests.unit.services.test_webhook": "tests.unit.operator.test_webhook",
    "tests.unit.services.test_webhook_intake": "tests.unit.operator.test_webhook_intake",
    "tests.unit.test_agent_settings": "tests.unit.agent.test_agent_settings",
    "tests.unit.test_crdgen": "tests.unit.hack.test_crdgen",
    "tests.unit.test_devenv_hostledger": "tests.unit.devenv.test_hostledger",
    "tests.unit.test_devenv_process": "tests.unit.devenv.test_process",
    "tests.unit.test_dra_core": "tests.unit.dra.test_dra_core",
    "tests.unit.test_krew": "tests.unit.hack.test_krew",
    "tests.unit.test_loops": "tests.unit.kube.test_loops",
    "tests.unit.test_memory": "tests.unit.kube.test_memory",
    "tests.unit.test_metrics_utilisation": "tests.unit.operator.test_metrics_utilisation",
    "tests.unit.test_plugin_output": "tests.unit.cli.test_plugin_output",
}
"""Old module -> new module. A package is named by its package (its ``__init__.py``); a
package stays a package and a module a module."""

DISSOLVED = ("kdra.domain", "kdra.services", "kdra.metrics", "tests.unit.domain",
             "tests.unit.services", "tests.unit.handlers")
"""Old packages with no new home as a whole: their modules all moved (:data:`MAPPING`), their
``__init__.py`` goes. A reference to one of them is listed, except ``kdra.metrics``, which
:data:`PER_PROGRAM` resolves."""

FILE_HOMES = {"kdra.metrics": "kdra.operator.metrics"}
"""Dissolved packages whose ``__init__.py`` moves anyway (the hand-made commit trims it):
``kdra.metrics``'s facade becomes the operator's."""

STAYS = {"kdra", "kdra.__main__", "tests.unit", "tests.unit.builders"}
"""Modules that stay as they are."""

KEPT = ("kdra.dra", "kdra.kube", "tests.unit.kube", "tests.e2e", "tests.node")
"""Trees that stay where they are: a module in them needs no mapping (``tests.unit.kube``
also receives moved tests)."""

NEW = (
    # packages and modules the re-cut creates (besides the targets of MAPPING and SYMBOLS)
    "kdra.agent.core", "kdra.agent.check",
    "kdra.cli", "kdra.cli.core", "kdra.cli.describe",
    "kdra.checks",
    "kdra.dra.usage", "kdra.dra.usage.claims",
    "kdra.kube.core", "kdra.kube.core.names", "kdra.kube.core.objects", "kdra.kube.flags",
    "kdra.kube.metrics", "kdra.kube.webhook_server",
    "kdra.operator", "kdra.operator.core", "kdra.operator.core.pod_devices",
    "kdra.operator.metrics", "kdra.operator.webhooks",
    "kdra.dra.quota_kind",
    "kdra.operator.claim_pods", "kdra.operator.claim_release",
    "kdra.operator.claim_owner",
    "kdra.agent.settings",
    "kdra.agent.core.node_check",
    # issue 38: the agent as the kubelet's DRA plugin (native flavour)
    "kdra.agent.kubelet", "kdra.agent.kubelet.gate", "kdra.agent.kubelet.messages",
    "kdra.agent.kubelet.plugin", "kdra.agent.kubelet.server", "kdra.agent.kubelet.service",
    "kdra.agent.core.kubelet", "kdra.agent.protodesc",
    "tests.unit.agent.kubelet_side", "tests.unit.agent.test_kubelet_core",
    "tests.unit.agent.test_kubelet_messages", "tests.unit.agent.test_kubelet_plugin",
    "tests.unit.agent.wire_bytes",
    # the device-backend seam (issue 37, point 4): the protocol, the backends, the registry
    "kdra.agent.core.backend", "kdra.agent.core.gpu_backend",
    "kdra.agent.backends", "kdra.agent.backends.registry", "kdra.agent.backends.fake_gpu",
    "kdra.agent.backends.generic", "kdra.agent.backends.inventory_file",
    "kdra_devenv.__main__",
    "tests.unit.agent", "tests.unit.cli", "tests.unit.devenv", "tests.unit.dra",
    "tests.unit.hack", "tests.unit.operator",
    "tests.unit.agent.nri_runtime_messages", "tests.unit.agent.test_backends",
    "tests.unit.dra.test_allocator_pacing", "tests.unit.operator.test_binder_cel_pacing",
    "tests.unit.test_wheel", "tests.unit.hack.test_recut",
    "tests.unit.operator.test_admission_native", "tests.unit.operator.test_native_services",
    # issue 41 (ux1): what a user should hear about pods kdra would pass over in silence
    "kdra.operator.core.pod_notices", "kdra.operator.notices", "kdra.dra.quota",
    "kdra.cli.core.why_quota", "kdra.cli.core.why_render",
    "tests.unit.operator.test_reporting", "tests.e2e.test_first_day",
    # issue 41 (ux2): the examples' DeviceClasses and the demo's agree
    "tests.unit.devenv.test_examples",
    # issue 40: gangs — joint placement of a pod group
    "kdra.operator.core.gangs", "kdra.operator.scheduler.gangs",
    "kdra.operator.scheduler.gang_writes", "tests.unit.dra.test_allocator_gang",
    "tests.unit.operator.test_gangs", "tests.unit.operator.test_binder_gangs",
    "tests.unit.dra.test_allocator_gangplace",
    # issue 40 (gangpre): preemption for a whole gang; PodGroup objects
    "kdra.operator.scheduler.gang_preemption", "tests.unit.operator.test_gang_preemption",
    "tests.unit.operator.test_binder_gang_preemption",
    "tests.unit.operator.test_binder_pod_groups",
    # issue 38 (natdef): hack/kind-up.sh's kind configuration, native by default
    "tests.unit.hack.test_kind_up", "tests.unit.test_bench_report",
    # issue 41 (freectr): free counts devices blocked by shared counters as blocked
    "tests.unit.dra.test_utilisation_counters",
    # 2026-12-05: the utilisation scrape's memo; a gang's search beside the scheduling loop
    "tests.unit.dra.test_utilisation_memo", "tests.unit.operator.test_gang_search_beside_loop",
    # issue 37 point 3 (cache): the typed caches the operator's services subscribe to
    "kdra.operator.caches",
    # issue 42: a pod's claim-name record rides on its Binding
    "kdra.operator.core.claim_records", "tests.unit.operator.test_claim_records",
)
"""Modules that exist only after the re-cut (no old module moves there)."""

Target = str | dict[str, str]
"""A symbol's new module: one module, or one per program of the product file that refers to
it (keys: ``operator``, ``agent``, ``cli``, ``kube``, ``dra``, ``main``; ``*`` for any other
file: tests, benchmarks, hack/ — they get the whole, e.g. :mod:`kdra.checks`)."""

SYMBOLS: dict[str, dict[str, Target]] = {
    # settings.py: one module per program, the flag machinery shared in kube
    "kdra.settings": {
        "AgentSettings": "kdra.agent.settings",
        "agent_from_args": "kdra.agent.settings",
        "_bool": "kdra.kube.flags",
        "_docs": "kdra.kube.flags",
    },
    # describe.py: the claim rows (who holds which device) are shared with the operator's
    # utilisation gauges: the DRA core's usage views
    "kdra.domain.describe": {
        "ClaimRow": "kdra.dra.usage.claims",
        "ClaimDevice": "kdra.dra.usage.claims",
        "claims_of": "kdra.dra.usage.claims",
        "natural": "kdra.dra.usage.claims",
        "UNHEALTHY_REASON": "kdra.dra.usage.claims",
    },
    # scheduling.py: the device annotations of a bound pod are the binder's own
    "kdra.domain.scheduling": {
        "container_devices": "kdra.operator.core.pod_devices",
    },
    # searches.py: the search budget is shared with `kubectl kdra why`
    "kdra.services.searches": {
        "SearchBudget": "kdra.dra.scheduling",
    },
    # publication.py: bounded object names are shared with the agent Lease names (kube)
    "kdra.domain.publication": {
        "bounded_name": "kdra.kube.core.names",
        "dashed": "kdra.kube.core.names",
    },
    # invariants.py: the node-local rules are the agent's; the whole check is kdra.checks
    "kdra.domain.invariants": {
        "NodeLocal": {"agent": "kdra.agent.core.node_check", "*": "kdra.checks"},
        "check": {"cli": "kdra.cli.core.invariants", "*": "kdra.checks"},
        "Violation": {"cli": "kdra.cli.core.invariants", "*": "kdra.checks"},
        "RULES": {"cli": "kdra.cli.core.invariants", "*": "kdra.checks"},
    },
    # handlers/check.py: reading a node's disk is the agent's; the whole check is kdra.checks
    "kdra.handlers.check": {
        "read_local": {"agent": "kdra.agent.check", "*": "kdra.checks"},
        "CHECKPOINT_PREFIX": {"agent": "kdra.agent.check", "*": "kdra.checks"},
        "read_cluster": {"cli": "kdra.cli.check", "*": "kdra.checks"},
        "violations": {"cli": "kdra.cli.check", "*": "kdra.checks"},
        "run_check": {"cli": "kdra.cli.check", "*": "kdra.checks"},
    },
    # the NRI runtime side (what containerd does) is only ever used by tests
    "kdra.services.agent.nri.messages": {
        name: "tests.unit.agent.nri_runtime_messages" for name in (
            "decode_register_plugin", "encode_configure", "decode_configure_response",
            "encode_synchronize", "decode_synchronize_response", "encode_create_container",
            "decode_create_container_response")
    },
}
"""Modules split by hand: symbol -> its new module (the others follow :data:`MAPPING`)."""

PER_PROGRAM: dict[str, dict[str, str]] = {
    # metrics/: each program exports only its own metrics and serves them with kube's server
    "kdra.metrics": {"operator": "kdra.operator.metrics", "agent": "kdra.agent.metrics",
                     "kube": "kdra.kube.metrics"},
}
"""Old modules whose new home depends on the program of the file referring to them."""

AMBIGUOUS: dict[str, frozenset[str]] = {
    "kdra.cli": frozenset({"main", "build_parser", "Command", "_operator", "_webhooks",
                           "_agent", "_health_mark", "_demo", "_controlplane", "_node",
                           "_describe", "_check"}),
}
"""Old modules whose name is also a new module's: what only the old one had."""

COMMANDS: list[tuple[str, str]] = [
    # argv lists
    (r'"-m", "kdra", "(demo|controlplane|node)"', r'"-m", "kdra_devenv", "\1"'),
    # the Makefile
    (r"\$\(VENV\)/bin/kdra (demo|controlplane|node)\b", r"$(PY) -m kdra_devenv \1"),
    # shell lines in docs
    (r"\.venv/bin/kdra (demo|controlplane|node)\b", r".venv/bin/python -m kdra_devenv \1"),
    # code spans in docs and docstrings
    (r"(`+)kdra (demo|controlplane|node up|node down|node up/down|node)\b",
     r"\1python -m kdra_devenv \2"),
]
"""The dev-only subcommands' new command lines (regular expression -> replacement)."""

SKIP_FILES = {"hack/recut.py", "hack/recut_map.py", "hack/recut_refs.py",
              "tests/unit/hack/test_recut.py"}
"""Files never rewritten: they hold the old names on purpose."""

PROGRAMS = ("operator", "agent", "cli", "kube", "dra")
