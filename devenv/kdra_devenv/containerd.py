"""A real containerd 2.x on this machine, isolated from the host's: kdra's node tiers run
pods on it (the NRI plugin's integration test, and the real kubelet node built on top).

``Containerd(workdir, nri_socket=..., cdi_spec_dirs=...)`` writes a config (version 3) and
starts containerd with everything under ``workdir``: root, state, gRPC and ttrpc sockets, the
runc state (``Root``), NRI plugin directories, the ``/opt/containerd`` plugin path, logs. The
NRI socket, CDI spec directories, sandbox image and CNI directories are the caller's. The
fixes this machine needs (docs/architecture.md, "What a real node needs") are built in:
``restrict_oom_score_adj`` (the VM withholds
CAP_SYS_RESOURCE) and runc with cgroupfs. :meth:`Containerd.crictl` and
:meth:`Containerd.ctr` run the clients against it; :meth:`Containerd.import_image` loads an
OCI archive (see :mod:`kdra_devenv.images`).

Binaries: containerd, its runc shim, ctr and crictl from ``hack/build-node.sh`` (cached in
``~/.cache/kdra/bin/containerd-v<version>``, or ``KDRA_CONTAINERD_BIN_DIR``); runc from the
Debian package. :func:`missing_prerequisites` says what stops containers running here.

Invariants:
- Nothing is written to the host's containerd paths (/var/lib/containerd, /run/containerd's
  sockets, /opt/containerd, /etc/cdi, /var/run/cdi) unless the caller passes them. One
  exception, fixed in containerd: each shim's socket is ``/run/containerd/s/<hash>`` (the
  hash covers this instance's address, so it never collides; the shim removes it, and
  :meth:`Containerd.stop` the directories if it created them and they are empty).
- containerd is started by :func:`kdra_devenv.process.spawn` (it dies with its starter).
- :meth:`Containerd.stop` — also after a failed start — removes every pod it can through the
  CRI, stops containerd, force-deletes the containers left in its runc root (their processes
  die), kills its shims, unmounts everything still mounted under ``workdir``, and removes the
  cgroup :attr:`Containerd.cgroup_parent` (pods created with it as ``cgroup_parent``) in every
  hierarchy. The host is left as it was found.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from kdra_devenv.controlplane import repo_root
from kdra_devenv.process import spawn, terminate

__all__ = [
    "CONTAINERD_VERSION",
    "SANDBOX_IMAGE",
    "Containerd",
    "ContainerdError",
    "binaries",
    "missing_prerequisites",
]

CONTAINERD_VERSION = os.environ.get("KDRA_CONTAINERD_VERSION", "2.2.9")
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.1"
"""The sandbox image containerd 2.2 pins; import a pause image under this name."""
TOOLS = ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")
NAMESPACE = "k8s.io"
SHIM_SOCKETS = Path("/run/containerd/s")
"""Where every containerd puts its shims' sockets (fixed in containerd's code)."""


class ContainerdError(RuntimeError):
    """containerd could not be built or started; the message says why and what to do."""


def binaries(build: bool = True) -> Path:
    """Directory with containerd, the runc shim, ctr and crictl; builds them when missing
    (``hack/build-node.sh``, ~4 minutes once) unless ``build`` is false."""
    override = os.environ.get("KDRA_CONTAINERD_BIN_DIR")
    cache = Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra"))
    directory = Path(override) if override else \
        cache / "bin" / f"containerd-v{CONTAINERD_VERSION}"
    if all((directory / t).exists() for t in TOOLS) or override or not build:
        missing = [t for t in TOOLS if not (directory / t).exists()]
        if missing:
            raise ContainerdError(f"{directory} lacks {', '.join(missing)} "
                                  "(run hack/build-node.sh)")
        return directory
    script = repo_root() / "hack" / "build-node.sh"
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ContainerdError(f"hack/build-node.sh failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def missing_prerequisites() -> list[str]:
    """Why containers cannot run on this machine (empty: they can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (containerd and runc need root)")
    if shutil.which("runc") is None:
        problems.append("no runc on PATH (apt-get install -y runc)")
    if not Path("/sys/fs/cgroup").is_dir():
        problems.append("no /sys/fs/cgroup")
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if "overlay" not in filesystems:
        problems.append("the kernel offers no overlay filesystem (modprobe overlay)")
    return problems


def _toml(value: Any) -> str:
    """A TOML value (strings, booleans, numbers, lists of them): JSON's forms are TOML's."""
    return json.dumps(value)


class Containerd:
    """One containerd; see the module docstring. Use as a context manager or call
    :meth:`start` and :meth:`stop`."""

    def __init__(self, workdir: Path, *, nri_socket: Path | None = None,
                 cdi_spec_dirs: Sequence[Path] = (), sandbox_image: str = SANDBOX_IMAGE,
                 cni_conf_dir: Path | None = None,
                 cni_bin_dirs: Sequence[str] = ("/usr/lib/cni",),
                 nri_required_plugins: Sequence[str] = (),
                 nri_tolerate_missing_annotation: str = "",
                 bin_dir: Path | None = None, runc: str = "runc",
                 log_level: str = "info") -> None:
        """``nri_socket``: where NRI listens (None: NRI off). ``nri_required_plugins``:
        names NRI's default validator requires at every container creation (then a
        container fails to create while one of them is not registered), and
        ``nri_tolerate_missing_annotation`` the pod annotation that exempts a pod."""
        self.workdir = workdir
        self.nri_socket = nri_socket
        self.cdi_spec_dirs = tuple(cdi_spec_dirs)
        self.sandbox_image = sandbox_image
        self.cni_conf_dir = cni_conf_dir or workdir / "cni" / "net.d"
        self.cni_bin_dirs = tuple(cni_bin_dirs)
        self.nri_required_plugins = tuple(nri_required_plugins)
        self.nri_tolerate_missing_annotation = nri_tolerate_missing_annotation
        self.bin_dir = bin_dir
        self.runc = runc
        self.log_level = log_level
        self.cgroup_parent = f"kdra-containerd-{secrets.token_hex(4)}"
        """A cgroup for the pods of this instance (pass it as the pods' ``cgroup_parent``):
        :meth:`stop` removes it."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._made: list[Path] = []  # host directories containerd creates that were absent

    # ------------------------------------------------------------------ paths

    @property
    def address(self) -> Path:
        """containerd's gRPC socket (the CRI endpoint is ``unix://<address>``)."""
        return self.workdir / "containerd.sock"

    @property
    def root(self) -> Path:
        return self.workdir / "root"

    @property
    def state(self) -> Path:
        return self.workdir / "state"

    @property
    def runc_root(self) -> Path:
        return self.workdir / "runc"

    @property
    def crictl_config(self) -> Path:
        """crictl's configuration for this containerd (``crictl --config``)."""
        return self.workdir / "crictl.yaml"

    @property
    def log_path(self) -> Path:
        return self.workdir / "containerd.log"

    @property
    def config_path(self) -> Path:
        return self.workdir / "config.toml"

    def config(self) -> str:
        """containerd's configuration (version 3)."""
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        runc = f"{runtime}.containerd.runtimes.runc"
        nri = "plugins.'io.containerd.nri.v1.nri'"
        lines = [
            "version = 3",
            f"root = {_toml(str(self.root))}",
            f"state = {_toml(str(self.state))}",
            "imports = []",
            "disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', "
            "'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper']",
            "[grpc]", f"  address = {_toml(str(self.address))}",
            "[ttrpc]", f"  address = {_toml(str(self.address) + '.ttrpc')}",
            "[debug]", f"  level = {_toml(self.log_level)}",
            "[plugins.'io.containerd.internal.v1.opt']",
            f"  path = {_toml(str(self.workdir / 'opt'))}",
            f"[{runtime}]",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = {_toml([str(d) for d in self.cdi_spec_dirs])}",
            "  restrict_oom_score_adj = true",
            # Pods' network namespaces under the state directory, not /var/run/netns.
            "  netns_mounts_under_state_dir = true",
            f"[{runtime}.containerd]", "  default_runtime_name = 'runc'",
            f"[{runc}]", "  runtime_type = 'io.containerd.runc.v2'",
            f"[{runc}.options]", "  SystemdCgroup = false",
            f"  Root = {_toml(str(self.runc_root))}",
            f"  BinaryName = {_toml(self.runc)}",
            f"[{runtime}.cni]",
            f"  bin_dirs = {_toml(list(self.cni_bin_dirs))}",
            f"  conf_dir = {_toml(str(self.cni_conf_dir))}",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"  sandbox = {_toml(self.sandbox_image)}",
            f"[{nri}]",
            f"  disable = {_toml(self.nri_socket is None)}",
            f"  socket_path = {_toml(str(self.nri_socket or self.workdir / 'nri.sock'))}",
            f"  plugin_path = {_toml(str(self.workdir / 'nri' / 'plugins'))}",
            f"  plugin_config_path = {_toml(str(self.workdir / 'nri' / 'conf.d'))}",
        ]
        if self.nri_required_plugins:
            lines += [f"[{nri}.default_validator]", "  enable = true",
                      f"  required_plugins = {_toml(list(self.nri_required_plugins))}"]
            if self.nri_tolerate_missing_annotation:
                lines.append("  tolerate_missing_plugins_annotation = "
                             + _toml(self.nri_tolerate_missing_annotation))
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ life

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        """Start containerd and wait until its CRI answers. Raises ContainerdError (and
        cleans up) when it does not."""
        if self.bin_dir is None:
            self.bin_dir = binaries()
        for directory in (self.workdir, self.cni_conf_dir, self.workdir / "nri" / "plugins",
                          self.workdir / "nri" / "conf.d", *self.cdi_spec_dirs):
            directory.mkdir(parents=True, exist_ok=True)
        if self.nri_socket is not None:
            self.nri_socket.parent.mkdir(parents=True, exist_ok=True)
        self._made += [d for d in (SHIM_SOCKETS.parent, SHIM_SOCKETS) if not d.exists()]
        self.config_path.write_text(self.config())
        endpoint = f"unix://{self.address}"
        self.crictl_config.write_text(f"runtime-endpoint: {endpoint}\nimage-endpoint: "
                                      f"{endpoint}\ntimeout: 30\n")
        self._log = self.log_path.open("ab")
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        self.proc = spawn([self.bin_dir / "containerd", "--config", self.config_path],
                          run_dir=self.workdir, stdout=self._log, stderr=subprocess.STDOUT,
                          env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise ContainerdError(f"containerd exited ({self.proc.returncode}):\n"
                                      f"{self.logs()[-3000:]}")
            if self.address.exists() and self.crictl("info", check=False).returncode == 0:
                return
            time.sleep(0.2)
        self.stop()
        raise ContainerdError(f"containerd did not answer within {timeout:.0f} s:\n"
                              f"{self.logs()[-3000:]}")

    def restart(self, timeout: float = 60.0) -> None:
        """Stop the containerd process only (pods, containers and shims keep running, as
        in a runtime upgrade) and start it again on the same state."""
        if self.proc is not None:
            terminate(self.proc, grace=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.start(timeout)

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop containerd and undo everything it did on the host (see the invariants)."""
        if self.proc is not None and self.proc.poll() is None:
            self._remove_pods()
        if self.proc is not None:
            terminate(self.proc, grace=10)
        self._delete_containers()
        self._kill_shims()
        self._unmount()
        self._remove_cgroups()
        for directory in reversed(self._made):  # only if still empty: others may use them
            with contextlib.suppress(OSError):
                directory.rmdir()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _remove_pods(self) -> None:
        pods = self.crictl("pods", "-q", check=False).stdout.split()
        for pod in pods:
            self.crictl("stopp", pod, check=False)
            self.crictl("rmp", "-f", pod, check=False)

    def _delete_containers(self) -> None:
        root = self.runc_root / NAMESPACE
        if not root.is_dir():
            return
        for state in root.iterdir():
            subprocess.run([self.runc, "--root", str(root), "delete", "--force", state.name],
                           capture_output=True, check=False)

    def _kill_shims(self) -> None:
        marker = f"-address\0{self.address}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            shim = cmdline.startswith(b"containerd-shim") or b"/containerd-shim" in cmdline
            if shim and marker in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount(self) -> None:
        workdir = str(self.workdir.resolve())
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].encode().decode("unicode_escape")
                if point == workdir or point.startswith(workdir + "/"):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        base = Path("/sys/fs/cgroup")
        roots = [base] + ([p for p in base.iterdir() if p.is_dir()] if base.is_dir() else [])
        for root in roots:
            top = root / self.cgroup_parent
            if not top.is_dir():
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()),
                                    key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    # ------------------------------------------------------------------ clients

    def crictl(self, *args: str, check: bool = True, timeout: float = 60
               ) -> subprocess.CompletedProcess[str]:
        """``crictl`` against this containerd (runtime and image endpoint)."""
        return self._run([str(self._tool("crictl")), "--config", str(self.crictl_config),
                          *args], check, timeout)

    def ctr(self, *args: str, check: bool = True, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this containerd, in the CRI's namespace."""
        return self._run([str(self._tool("ctr")), "--address", str(self.address),
                          "--namespace", NAMESPACE, *args], check, timeout)

    def import_image(self, archive: Path) -> None:
        """Load an OCI image archive and unpack it for the CRI."""
        self.ctr("images", "import", str(archive))

    def _tool(self, name: str) -> Path:
        return (self.bin_dir or binaries(build=False)) / name

    @staticmethod
    def _run(cmd: list[str], check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                check=False)
        if check and result.returncode != 0:
            raise ContainerdError(f"{' '.join(cmd[:1] + cmd[-3:])} failed "
                                  f"({result.returncode}): {result.stderr.strip()[-2000:]}")
        return result
