"""kdra's agent as the kubelet's DRA plugin (the native flavour), in Python on grpcio.

The kubelet finds the plugin through its plugin watcher (a registration socket per driver),
then calls the DRA node service to prepare and unprepare claims before and after a pod's
containers run, and streams device health (``shared/KUBELET-DRA.md``)::

    messages.py  the kubelet's protobuf messages, declared from its documented APIs
    server.py    grpcio's server: Registration, DRAPlugin v1 and v1beta1, DRAResourceHealth
    gate.py      the sockets the kubelet reaches: permissions and the callers' credentials
    service.py   NodePrepareResources / NodeUnprepareResources on the agent's Preparer
    plugin.py    one plugin per driver: sockets, registration, health stream, lifecycle

The decisions without I/O are :mod:`kdra.agent.core.kubelet`'s. The NRI plugin
(:mod:`kdra.agent.nri`) is the kdra flavour's way to the containers; this is the native one.
"""
