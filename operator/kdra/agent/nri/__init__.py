"""kdra's NRI plugin (Node Resource Interface, containerd/nri), in Python on asyncio.

No Python library speaks NRI or ttrpc, so kdra implements the protocol itself::

    wire.py      the socket's framing: NRI's connection multiplexing, ttrpc messages (no I/O)
    messages.py  the protobuf messages kdra uses, declared from NRI's and ttrpc's APIs
    session.py   one connection: a ttrpc server (the runtime calls) and client (kdra calls)
    plugin.py    registration, Configure / Synchronize / CreateContainer / Shutdown, reconnects

What a container gets is decided by :mod:`kdra.agent.core.exposure`, fed by
:mod:`kdra.agent.exposure`.
"""
