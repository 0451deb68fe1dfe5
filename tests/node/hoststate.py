"""What the real node could change on this host, read as text: compare a snapshot taken before
the node started with one taken after it stopped.

Covers what kdra_devenv.node changes or could leave behind: the firewall (iptables-save and
the whole nftables ruleset), addresses and links, mounts, cgroups at the top of every
hierarchy, the sysctls kubelet and the CNI bridge plugin set, the well-known directories
kubelet, containerd, CNI and the agent write to, and processes marked as started by kdra's
tooling for a run that no longer exists.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from kdra_devenv.hostledger import cgroup_hierarchies
from kdra_devenv.node import CHANGED_SYSCTLS, ledger

WATCHED = ("/var/run/cdi", "/var/run/nri", "/run/containerd", "/var/lib/cni",
           "/var/log/containers", "/var/log/pods", "/var/lib/kdra", "/var/lib/kubelet",
           "/var/run/netns", "/etc/cni", "/opt/cni", "/etc/kubernetes", "/var/lib/containerd",
           "/usr/libexec/kubernetes", "/opt/containerd", "/etc/cdi")


def _command(*cmd: str, missing: str | None = None) -> str:
    """``cmd``'s output; a command not installed reads as ``missing`` (default: a marker)."""
    if shutil.which(cmd[0]) is None:
        return f"<{cmd[0]} not installed>" if missing is None else missing
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if not line.startswith("#")]  # iptables-save's dated comments
    return "\n".join(lines)


def _listening(path: Path) -> bool:
    """A unix socket someone serves (another containerd's shim, say): not this node's."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _tree(path: Path, depth: int = 2) -> list[str]:
    if (not path.exists() and not path.is_symlink()) or (path.is_socket() and _listening(path)):
        return []
    found = [str(path)]
    if depth and path.is_dir() and not path.is_symlink():
        for child in sorted(path.iterdir()):
            found += _tree(child, depth - 1)
    return found


def snapshot() -> dict[str, str]:
    """The host's state as comparable text, one entry per aspect."""
    state = {
        # On a fresh machine the tier itself installs iptables and nftables (Debian) after the
        # first snapshot: a firewall tool that was absent set no rules, so it reads as an empty
        # ruleset; any rule the node leaves behind still shows in the second snapshot.
        "iptables-save": _command("iptables-save", missing=""),
        "nft list ruleset": _command("nft", "list", "ruleset", missing=""),
        "ip addr": _command("ip", "-o", "addr", "show"),
        "ip link": "\n".join(sorted(line.split(":")[1].strip() for line in
                                    _command("ip", "-o", "link", "show").splitlines()
                                    if ":" in line)),
        "mounts": "\n".join(sorted(line.split()[4] for line in
                                   Path("/proc/self/mountinfo").read_text().splitlines())),
        "cgroups": "\n".join(sorted(str(p) for h in cgroup_hierarchies()
                                    for p in h.iterdir() if p.is_dir())),
        "sysctls": "\n".join(
            f"{key}={Path('/proc/sys', key.replace('.', '/')).read_text().strip()}"
            for key in CHANGED_SYSCTLS if Path("/proc/sys", key.replace(".", "/")).exists()),
        "files": "\n".join(entry for path in WATCHED for entry in _tree(Path(path))),
        "node runtime directory": "\n".join(_tree(ledger().directory / "rt", depth=0)),
    }
    marked = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
                comm = (entry / "comm").read_text().strip()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            # kubelet, and containerd or shims of a node (kdra_devenv.node's layout: rt/);
            # an NRI test's containerd running at the same time is not the node's.
            ours = comm == "kubelet" or (comm.startswith("containerd") and b"/rt/containerd" \
                in cmdline)
            if b"KDRA_DEVENV_OWNER=" in environ and ours:
                marked.append(comm)
    state["node processes"] = "\n".join(sorted(marked))
    return state


def differences(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Aspects whose text differs: {aspect: (before, after)}."""
    return {key: (before.get(key, ""), after.get(key, "")) for key in sorted(set(before) |
            set(after)) if before.get(key) != after.get(key)}


if __name__ == "__main__":  # python -m tests.node.hoststate > file: a snapshot by hand
    import json
    import sys

    if len(sys.argv) == 3:
        old, new = (json.loads(Path(a).read_text()) for a in sys.argv[1:])
        for key, (a, b) in differences(old, new).items():
            print(f"== {key}\n-- before:\n{a}\n-- after:\n{b}")
    else:
        print(json.dumps(snapshot(), indent=1))
