"""The node agent (``kdra agent``): kdra's kubelet plugin, one concern per module.

::

    process.py     the ``kdra agent`` process: settings, event loop, signals, exit codes
    runner.py      one node or many simulated ones: start-up order, claim watch, loops
    node.py        everything done for one node: devices, health, Leases, slices, prepares
    discovery.py   devices from NVML (real GPUs) or a fake inventory file
    publisher.py   ResourceSlices of the node's pools (wipe at start, generation bumps)
    heartbeat.py   one Lease per node and driver, read by the operator's slice GC
    prepare.py     prepare/unprepare claims: CDI specs, checkpoint, status.devices
    cdi.py         the CDI spec directory
    checkpoint.py  atomic, durable files; the checkpoint file
    exposure.py    what a container gets at creation: the NRI plugin's policy and set-up
    nri/           the NRI plugin: wire framing, messages, the ttrpc session, lifecycle

The pure rules (inventory format, slices, heartbeat Leases, CDI spec content, checkpoint
model, which devices a container gets) live in :mod:`kdra.agent.core.inventory`,
:mod:`kdra.agent.core.inventory_devices`, :mod:`kdra.agent.core.gpu_profiles`,
:mod:`kdra.agent.core.publication`, :mod:`kdra.kube.core.agent_leases`, :mod:`kdra.agent.core.nodeprep`,
:mod:`kdra.agent.core.cdi`, :mod:`kdra.agent.core.checkpoint` and :mod:`kdra.agent.core.exposure`.
"""
