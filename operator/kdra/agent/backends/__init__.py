"""The node agent's device backends: one module per kind of device, behind the protocol of
:mod:`kdra.agent.core.backend` (what a vendor is asked: devices, health, prepare edits, CDI
content, container env conventions)::

    registry.py        which backends an agent runs (--backends): the built-in table,
                       a vendor's module:Class
    nvml.py            real NVIDIA GPUs through NVML (nvml_mig.py: MIG devices,
                       nvml_health.py: XIDs, ECC, lost GPUs)
    fake_gpu.py        the inventory file's GPU profiles
    generic.py         the inventory file's other devices (the seed's cats)
    inventory_file.py  the inventory file, read once per change for the two above

What the two GPU backends share, without I/O, is :mod:`kdra.agent.core.gpu_backend`. A new
vendor is one module with a :class:`~kdra.agent.core.backend.BackendBase` subclass, named in
``--backends`` as ``module:Class`` (tests/fpga_backend.py is one); no other agent module
changes.
"""
