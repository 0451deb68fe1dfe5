"""The node agent (``kdra agent``): kdra's kubelet plugin — it publishes a node's devices,
prepares the claims allocated to it and exposes them to containers (kdra flavour: from a
claim watch, through NRI; native flavour: as the kubelet's DRA plugin).

Its rooms, each importing only those below it (import-linter)::

    process.py      the ``kdra agent`` process: settings, event loop, signals, exit codes
    runner.py       one node or many simulated ones: start-up order, claim watch, loops
    node.py         everything done for one node: devices, health, Leases, slices, prepares
    exposure.py     what a container gets at creation: the NRI plugin's policy and set-up
    nri/            the NRI plugin: wire framing, messages, the ttrpc session, lifecycle
    kubelet/        (native flavour) the kubelet's DRA plugin: gRPC services, sockets, health
    node_health.py  one node's health loop: sources (marks, each backend's), debounce, taints
    backends/       the device backends, one module per kind of device: nvml (real GPUs,
                    MIG, NVML health), fake-gpu and generic (the inventory file), a vendor's
                    module:Class; registry.py: which ones run (--backends)
    protodesc.py    protobuf messages declared as tables (NRI's, the kubelet's)
    publisher.py    ResourceSlices of the node's pools (wipe at start, generation bumps)
    heartbeat.py    one Lease per node and driver, read by the operator's slice GC
    prepare.py      prepare/unprepare claims: CDI specs, checkpoint, status.devices
    health.py       health sources, the marks file, ``kdra agent health mark``
    cdi.py          the CDI spec directory
    checkpoint.py   atomic, durable files; the checkpoint file
    check.py        a node's disk read for ``kdra check --cdi-dir/--state-dir``
    metrics.py      the agent's metrics
    settings.py     AgentSettings: one frozen object, flags and environment
    core/           the pure core: every decision without I/O (below)

``core/`` — decisions, no I/O, no API client, nothing of the shell::

    backend.py                           the DeviceBackend protocol (what a vendor is asked),
                                         BackendBase, one agent's set of Backends
    gpu_backend.py                       what the nvml and fake-gpu backends share
    inventory.py, inventory_devices.py   the fake inventory format; the devices a node has
    gpu_profiles.py, gpu_modes.py        GPU models and naming; whole, partitioned or shared
    gpu_partitions.py, shares.py         MIG-like partitions (KEP-4815); shares of a GPU
    publication.py, pool_layout.py       devices -> a pool's ResourceSlices
    health.py                            health states, the debounce, the taints
    nodeprep.py, node_accounting.py      which claims to prepare, what is recorded; the fit
    checkpoint.py, cdi.py                the checkpoint model; the CDI spec content
    kubelet.py                           the kubelet plugin's decisions: claims, answers, callers
    exposure.py                          which devices and env a container gets
    node_check.py                        ``kdra check``'s rules for a node's disk

The agent's rooms ask each device's backend (by the name it carries) and never import one; a
new kind of device is one module (tests/fpga_backend.py). The agent's Lease names and the
pod<->claim conventions it reads are :mod:`kdra.kube.core`'s; the models, taints and
quantities :mod:`kdra.dra`'s.
"""
