"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

Used by the end-to-end tests, ``python -m kdra_devenv demo`` and the benchmarks. The binaries are
the real ones, built from Go modules by ``hack/build-control-plane.sh`` and cached outside the
repository (see :func:`binaries`). Nothing here is mocked.

Invariants:
- Every process listens on 127.0.0.1 only, on ports picked free at start-up.
- Authentication is by client certificates from a CA made fresh for each control plane;
  authorization is ``Node,RBAC``, as on a real cluster, so RBAC manifests can be tested.
- kube-controller-manager runs only the controllers tests rely on (garbage collector,
  namespace lifecycle, service accounts and their tokens' root CA, ClusterRole aggregation),
  unless told more (the real node, :mod:`kdra_devenv.node`, adds what Deployments and
  DaemonSets need).
- kube-scheduler runs only when asked (``with_scheduler``: pods that kdra does not schedule,
  on a real node).
- The API server reaches kubelets with a client certificate of the same CA (group
  ``system:masters``) and verifies their serving certificates against that CA.
- The API server presents a client certificate to admission webhooks (``CN``
  :data:`WEBHOOK_CLIENT`, of a CA of its own, :attr:`ControlPlane.webhook_client_ca`, which
  the API server does not trust: the certificate opens nothing but webhooks), as a
  cluster's ``--admission-control-config-file`` does; kdra's webhook server takes it with
  ``--webhook-client-ca``. Conversion webhooks get none (upstream sends none).
- :meth:`ControlPlane.stop` ends every process it started, even after a failed start; each
  process's output goes to ``<workdir>/<name>.log`` (read by :meth:`ControlPlane.logs`).
- Every process is started by :func:`kdra_devenv.process.spawn`: it dies with the process that
  started it, however that one ends (``python -m kdra_devenv controlplane`` stops them in order on
  SIGINT, SIGTERM and SIGHUP; a SIGKILL leaves the kernel to do it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from kdra_devenv.pki import CertificateAuthority, KeyPair, service_account_key
from kdra_devenv.process import spawn, terminate

KUBE_VERSION = os.environ.get("KDRA_KUBE_VERSION", "1.35.4")
SERVICE_CIDR = "10.96.0.0/16"
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    # edit/view/admin aggregate labelled roles (kdra-user): users' rights as on a cluster
    "clusterrole-aggregation-controller",
)
TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
WEBHOOK_CLIENT = "kube-apiserver-webhook-client"
"""The common name of the client certificate the API server presents to admission webhooks."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message says which part and why."""


def repo_root() -> Path:
    """The source checkout this package runs from (``devenv/kdra_devenv`` → repo)."""
    return Path(__file__).resolve().parents[2]


def binaries(progress: bool = True) -> Path:
    """Directory holding the control-plane binaries; builds them the first time.

    ``KDRA_BIN_DIR`` overrides the location (it must hold every tool). Otherwise the build
    script's cache (``~/.cache/kdra/bin/v<version>``) is used, and the script is run when a
    tool is missing — 10-25 minutes on 2 cores the first time, instant afterwards.
    """
    override = os.environ.get("KDRA_BIN_DIR")
    if override:
        directory = Path(override)
        missing = [t for t in TOOLS if not (directory / t).exists()]
        if missing:
            raise ControlPlaneError(f"KDRA_BIN_DIR={directory} lacks {', '.join(missing)}")
        return directory
    cache = Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra"))
    directory = cache / "bin" / f"v{KUBE_VERSION}"
    if all((directory / t).exists() for t in TOOLS):
        return directory
    script = repo_root() / "hack" / "build-control-plane.sh"
    if not script.exists():
        raise ControlPlaneError(f"control-plane binaries missing in {directory} and no {script}")
    if progress:
        print(f"kdra: building Kubernetes v{KUBE_VERSION} binaries (first run only) ...",
              file=sys.stderr, flush=True)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"{script} failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ControlPlane:
    """Start with :meth:`start` (or the :func:`running` context manager), stop with :meth:`stop`.

    ``kubeconfig`` is an admin kubeconfig (group ``system:masters``) for clients and kubectl.
    """

    workdir: Path
    bin_dir: Path
    with_controller_manager: bool = True
    #: Run kube-scheduler too (for pods kdra does not schedule, on a real node).
    with_scheduler: bool = False
    #: Controllers kube-controller-manager runs (the default set above unless given, e.g.
    #: ``(*CONTROLLERS, "resourceclaim-controller")`` for native DRA in the benchmarks).
    controllers: tuple[str, ...] = CONTROLLERS
    #: Extra kube-controller-manager flags, e.g. ``("--kube-api-qps", "5000")``.
    controller_manager_args: tuple[str, ...] = ()
    #: Extra kube-apiserver flags, e.g. an audit policy for a diagnostic run.
    apiserver_args: tuple[str, ...] = ()
    #: Extra kube-scheduler flags, e.g. ``("--feature-gates", "DRADeviceTaints=true")``.
    scheduler_args: tuple[str, ...] = ()
    api_port: int = 0
    etcd_port: int = 0
    processes: list[_Process] = field(default_factory=list)
    #: The control plane's CA (set by :meth:`start`): a real node's kubelet certificates.
    ca: CertificateAuthority | None = None
    #: Components stopped by :meth:`stop_component`: their arguments, to start them again.
    stopped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def webhook_client_ca(self) -> Path:
        """The CA of the client certificate the API server presents to admission webhooks."""
        return self.workdir / "pki-webhook-clients" / "ca.crt"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                as_user: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane."""
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig)]
        if as_user:
            cmd += ["--as", as_user]
        result = subprocess.run([*cmd, *args], input=input, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def kubectl_async(self, *args: str, input: str | None = None) -> subprocess.Popen[str]:
        """Start kubectl without waiting for it (e.g. a burst of creates during a fault)."""
        proc: subprocess.Popen[str] = spawn(
            [self.bin_dir / "kubectl", "--kubeconfig", self.kubeconfig, *args],
            run_dir=self.workdir, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True,
        )
        stdin = proc.stdin
        assert stdin is not None

        def feed() -> None:
            # kubectl creates each document as it reads it: writing a large input here
            # would block until most of the objects exist.
            with suppress(BrokenPipeError), stdin:
                if input is not None:
                    stdin.write(input)

        threading.Thread(target=feed, name="kubectl-stdin", daemon=True).start()
        return proc

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120.0) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        pki = self.workdir / "pki"
        ca = self.ca = CertificateAuthority(pki)
        serving = ca.issue(
            "apiserver", "kube-apiserver",
            server_names=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                          "kubernetes.default.svc", "10.96.0.1"),
        )
        admin = ca.issue("admin", "kdra-admin", organization="system:masters", client=True)
        kcm = ca.issue("controller-manager", "system:kube-controller-manager", client=True)
        kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                  organization="system:masters", client=True)
        sa_key = service_account_key(pki)
        admission_config = self._admission_config()
        self.etcd_port = self.etcd_port or free_port()
        self.api_port = self.api_port or free_port()
        _write_kubeconfig(self.kubeconfig, self.server, ca.cert_path, admin, "admin")
        kcm_config = self.workdir / "controller-manager.kubeconfig"
        _write_kubeconfig(kcm_config, self.server, ca.cert_path, kcm, "controller-manager")

        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        self._spawn("etcd", [
            "--name", "kdra", "--data-dir", str(self.workdir / "etcd-data"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"kdra={peer_url}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--quota-backend-bytes", str(4 * 1024**3),
            "--unsafe-no-fsync",  # test data only: fsync on a shared CI disk dominates latency
            "--log-level", "warn",
        ])
        self._wait(lambda: _http_ok(f"{etcd_url}/health"), "etcd", timeout)

        self._spawn("kube-apiserver", [
            "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.api_port),
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(ca.cert_path),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa_key),
            "--service-account-signing-key-file", str(sa_key),
            "--api-audiences", "https://kubernetes.default.svc",
            "--authorization-mode", "Node,RBAC",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--allow-privileged=true",
            "--kubelet-client-certificate", str(kubelet_client.cert),
            "--kubelet-client-key", str(kubelet_client.key),
            "--kubelet-certificate-authority", str(ca.cert_path),
            "--profiling=false",
            "--admission-control-config-file", str(admission_config),
            "--v=1",
            *self.apiserver_args,
        ])
        context = ssl.create_default_context(cafile=str(ca.cert_path))
        context.load_cert_chain(str(admin.cert), str(admin.key))
        self._wait(lambda: _http_ok(f"{self.server}/readyz", context), "kube-apiserver", timeout)

        if self.with_controller_manager:
            self._spawn("kube-controller-manager", [
                "--kubeconfig", str(kcm_config),
                "--authentication-kubeconfig", str(kcm_config),
                "--authorization-kubeconfig", str(kcm_config),
                "--controllers", ",".join(self.controllers),
                "--root-ca-file", str(ca.cert_path),
                "--service-account-private-key-file", str(sa_key),
                "--leader-elect=false", "--use-service-account-credentials=true",
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                "--concurrent-gc-syncs", "10",
                "--v=1",
                *self.controller_manager_args,
            ])
            self._wait(self._default_service_account_exists, "kube-controller-manager", timeout)

        if self.with_scheduler:
            scheduler = ca.issue("scheduler", "system:kube-scheduler", client=True)
            config = self.workdir / "scheduler.kubeconfig"
            _write_kubeconfig(config, self.server, ca.cert_path, scheduler, "scheduler")
            self._spawn("kube-scheduler", [
                "--kubeconfig", str(config),
                "--authentication-kubeconfig", str(config),
                "--authorization-kubeconfig", str(config),
                "--leader-elect=false",
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                "--v=1",
                *self.scheduler_args,
            ])

    def _admission_config(self) -> Path:
        """The admission configuration that makes the API server present a client
        certificate (:data:`WEBHOOK_CLIENT`) to every admission webhook."""
        clients = CertificateAuthority(self.workdir / "pki-webhook-clients",
                                       "kdra-local-webhook-clients-ca")
        pair = clients.issue("apiserver-webhook-client", WEBHOOK_CLIENT, client=True)
        kubeconfig = self.workdir / "admission-webhooks.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "users": [{"name": "*", "user": {"client-certificate": str(pair.cert),
                                            "client-key": str(pair.key)}}]}, indent=2))
        kubeconfig.chmod(0o600)
        webhook = {"apiVersion": "apiserver.config.k8s.io/v1",
                   "kind": "WebhookAdmissionConfiguration",
                   "kubeConfigFile": str(kubeconfig)}
        config = self.workdir / "admission.yaml"
        config.write_text(json.dumps({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": name, "configuration": webhook}
                        for name in ("ValidatingAdmissionWebhook",
                                     "MutatingAdmissionWebhook")]}, indent=2))
        return config

    def _default_service_account_exists(self) -> bool:
        self._check_alive()
        return self.kubectl("get", "serviceaccount", "default", "-n", "default",
                            check=False).returncode == 0

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            popen = spawn([self.bin_dir / name, *args], run_dir=self.workdir, stdout=out,
                          stderr=subprocess.STDOUT)
        self.processes.append(_Process(name, popen, log))

    def _check_alive(self) -> None:
        for proc in self.processes:
            code = proc.popen.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with {code}; last log lines:\n{_tail(proc.log)}"
                )

    def _wait(self, ready: object, what: str, timeout: float) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if ready():
                return
            time.sleep(0.25)
        raise ControlPlaneError(f"{what} not ready after {timeout:.0f}s; see {self.workdir}")

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Stop and start one component again with the same arguments (fault tests)."""
        self.stop_component(name)
        self.start_component(name)

    def stop_component(self, name: str) -> None:
        """Stop one component (SIGTERM, then SIGKILL after 10 s); :meth:`start_component`
        starts it again with the same arguments (fault tests: an outage of some length)."""
        proc = next(p for p in self.processes if p.name == name)
        args = proc.popen.args
        assert isinstance(args, list)
        terminate(proc.popen)
        self.processes.remove(proc)
        self.stopped[name] = [str(a) for a in args[1:]]

    def start_component(self, name: str) -> None:
        """Start a component :meth:`stop_component` stopped (without waiting for it)."""
        self._spawn(name, self.stopped.pop(name))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            terminate(proc.popen)
        self.processes.clear()

    def logs(self, lines: int = 60) -> str:
        return "\n".join(
            f"===== {log.name} (last {lines} lines) =====\n{_tail(log, lines)}"
            for log in sorted(self.workdir.glob("*.log"))
        )


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "<no log>"


def _write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kdra-local", "cluster": {
            "server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {
            "client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "kdra-local", "context": {"cluster": "kdra-local", "user": user}}],
        "current-context": "kdra-local",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


@contextmanager
def running(workdir: Path | None = None,
            with_controller_manager: bool = True) -> Iterator[ControlPlane]:
    """Start a control plane for the duration of a ``with`` block."""
    owned = workdir is None
    directory = workdir or Path(tempfile.mkdtemp(prefix="kdra-cp-"))
    plane = ControlPlane(directory, binaries(),
                         with_controller_manager=with_controller_manager).start()
    try:
        yield plane
    finally:
        plane.stop()
        if owned:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m kdra_devenv.controlplane [--dir D]``: run until Ctrl-C."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    parser.add_argument("--build-only", action="store_true", help="only build the binaries")
    args = parser.parse_args(argv)
    if args.build_only:
        print(binaries())
        return 0
    # Started in the background by a shell, SIGINT arrives ignored (and Python then installs no
    # handler of its own); SIGTERM and SIGHUP would end the process without stopping etcd and
    # the apiserver. Each of the three stops the control plane the same way.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    try:
        with running(args.dir) as plane:
            print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
            while True:
                signal.pause()
    except _Stopped as stopped:
        return 128 + stopped.signum


class _Stopped(BaseException):
    """Raised by a stop signal's handler: unwinds ``running`` so every process is stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_on_signal(signum: int, _frame: object) -> None:
    # Once: a second signal while stopping must not interrupt the clean-up.
    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, signal.SIG_IGN)
    raise _Stopped(signum)


if __name__ == "__main__":
    sys.exit(main())
