"""A real etcd + kube-apiserver + kube-controller-manager (+ kube-scheduler on demand) on loopback.

The e2e tests need the real admission chain, the real controllers and the real kube-scheduler, not a
fake: this module starts the binaries that `hack/control-plane.sh build` puts in a cache directory,
with client certificates as the only authentication (CN = user, O = groups) and RBAC, and stops them
by PID. There is no kubelet: nodes are fake, and tests set node and pod status themselves (helpers
below); kube-controller-manager runs only the controllers that make sense without kubelets
(`CONTROLLERS`).
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from certs import pki

KUBERNETES_VERSION = "v1.36.3"
KUSTOMIZE = "kustomize-v5.5.0"  # the kustomize that kubectl v1.32 embeds (hack/control-plane.sh says how we know)
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", KUSTOMIZE)
# kube-controller-manager's controllers, each named (`--controllers`): those a cluster without kubelets
# can use. Left out on purpose: node-lifecycle (it would taint our fake nodes unreachable, as no kubelet
# renews their leases, and evict their pods), pod-garbage-collector (it deletes pods bound to nodes that
# do not exist, which tests keep on purpose), taint-eviction, attach-detach, ttl, the cloud and IPAM
# ones, endpoints and endpointslices (no pod ever serves). serviceaccount-token runs whatever this says
# (it mints the other controllers' credentials); it is named so the health check waits for it too.
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "job-controller",
    "disruption-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "resourceclaim-controller",  # DRA: a claim per pod from its ResourceClaimTemplate; deallocation of unused claims
)
GPU_RESOURCE = "nvidia.com/gpu"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

_START_ATTEMPTS = 3  # a free port can be taken by someone else before the component binds it
_ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)


def cache_dir(variable: str, kind: str, version: str) -> Path:
    """Where a hack/ build script puts its binaries: `$variable`, else ~/.cache/gpu-scheduler/<kind>/<version>."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "gpu-scheduler" / kind / version


def binaries_in(directory: Path, names: Sequence[str]) -> Path | None:
    """`directory`/bin if every one of `names` is an executable there, else None (tests skip)."""
    bin_dir = directory / "bin"
    return bin_dir if all(os.access(bin_dir / name, os.X_OK) for name in names) else None


def required(bin_dir: Path | None, what: str, missing: str) -> Path:
    """`bin_dir`; when it is None the test skips saying `missing`, but under CI=true it fails: CI must run `what`."""
    if bin_dir is None:
        import pytest

        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the {what} cannot run: {missing}")
        pytest.skip(missing)
    return bin_dir


@dataclass(frozen=True)
class CachedTool:
    """Binaries a hack/ build script puts in a cache directory of their own (helm, kube-score, Prometheus):
    `$variable`, else ~/.cache/gpu-scheduler/<kind>/<version>; `names` must all be there; `what` the tests that need
    them, `missing` how to build them."""

    variable: str
    kind: str
    version: str
    names: tuple[str, ...]
    what: str
    missing: str

    @property
    def dir(self) -> Path:
        return cache_dir(self.variable, self.kind, self.version)

    def find(self) -> Path | None:
        """The bin directory if every binary is there, else None (tests skip)."""
        return binaries_in(self.dir, self.names)

    def require(self) -> Path:
        """The bin directory; without it skip, but under CI=true fail (`required`)."""
        return required(self.find(), self.what, self.missing)

    def bin_dir(self, given: Path | None = None) -> Path:
        """`given`, else the bin directory; FileNotFoundError saying how to build it when it is not there."""
        found = given or self.find()
        if found is None:
            raise FileNotFoundError(f"{self.kind} not found in {self.dir / 'bin'}: {self.missing}")
        return found


class CommandError(RuntimeError):
    """A built command's run that failed; the message carries the command, its exit code, stdout and stderr."""

    def __init__(self, result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        command = " ".join(str(arg) for arg in result.args)
        super().__init__(f"{command}\nexit code {result.returncode}\n"
                         f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}")


def default_dir() -> Path:
    """Where `hack/control-plane.sh build` puts the binaries (same env variable, same default)."""
    return cache_dir("GPU_SCHEDULER_CONTROL_PLANE_DIR", "control-plane", KUBERNETES_VERSION)


def find_binaries() -> Path | None:
    """The bin directory if every control-plane binary is there, else None (tests skip)."""
    return binaries_in(default_dir(), BINARIES)


def free_port() -> int:
    """A loopback port nobody listens on right now (racy: callers retry on 'address in use')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StartError(RuntimeError):
    """A component did not come up; the message carries the tail of its log."""


def _die_with_parent() -> None:
    """Runs in the child before exec: if pytest is killed, the kernel kills the component too."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class Process:
    """One component: started with its output in a log file, stopped by PID."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(self.args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n_lines: int = 50) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n_lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL when it does not exit within `timeout` seconds."""
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)


def _wait_for(
    what: str, ready: Callable[[], bool], process: Process, timeout: float, interval: float = 0.2
) -> None:
    """Poll `ready` until it is true; fail fast if the process exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise StartError(
                f"{process.name} exited with {process.popen.returncode} before {what}:\n"
                f"{process.tail()}"
            )
        try:
            if ready():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        time.sleep(interval)
    raise StartError(f"timed out after {timeout:.0f}s waiting for {what}:\n{process.tail()}")


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


def _start_with_retry(name: str, start: Callable[[], Process]) -> Process:
    """Start a component on fresh ports, again when a port was taken in the meantime."""
    for attempt in range(1, _START_ATTEMPTS + 1):
        try:
            return start()
        except StartError as error:
            if attempt == _START_ATTEMPTS or not _ADDRESS_IN_USE.search(str(error)):
                raise
    raise AssertionError(f"unreachable: {name}")


class Scheduler:
    """A running kube-scheduler; `stop()` ends it."""

    def __init__(self, process: Process, port: int, config_path: Path) -> None:
        self.process = process
        self.port = port
        self.config_path = config_path

    def stop(self) -> None:
        self.process.stop()


# Kubernetes' alpha Workload API (v1.36: scheduling.k8s.io/v1alpha2 Workload and PodGroup, the pod field
# spec.schedulingGroup), off by default; the session's apiserver serves it for the gang tests.
WORKLOAD_API_ARGS = ("--runtime-config=scheduling.k8s.io/v1alpha2=true",
                     "--feature-gates=GenericWorkload=true,GangScheduling=true")
# kube-scheduler with its alpha gang plugin (GangScheduling, over the Workload API's PodGroups)
GANG_SCHEDULER_ARGS = ("--feature-gates=GenericWorkload=true,GangScheduling=true",)


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, admin kubeconfig on disk; a
    context manager."""

    def __init__(
        self,
        bin_dir: Path | None = None,
        *,
        start_timeout: float = 120.0,
        extra_apiserver_args: Sequence[str] = (),
        controller_manager: bool = True,
        extra_controller_manager_args: Sequence[str] = (),
    ) -> None:
        """`extra_apiserver_args` go after the defaults (a later flag wins), e.g.
        `["--watch-cache=false"]` for watches served straight from etcd; `extra_controller_manager_args` likewise
        (e.g. `["--kube-api-qps=100"]`). Without `controller_manager` nothing acts on workloads, owners or volumes:
        only what the test itself does happens."""
        found = bin_dir or find_binaries()
        if found is None:
            raise FileNotFoundError(
                f"control-plane binaries not found in {default_dir() / 'bin'}: "
                "run hack/control-plane.sh build"
            )
        self.bin_dir = found
        self.start_timeout = start_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="gpu-scheduler-cp-"))
        self.ca = pki.new_ca("gpu-scheduler-e2e-ca")
        self.ca_cert = self.dir / "ca.crt"
        self.ca_cert.write_bytes(self.ca.cert_pem)
        self.server = ""
        self.etcd_url = ""
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.controller_manager = controller_manager
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self._apiserver: Process | None = None
        self._components: list[Process] = []
        self._kubeconfigs = 0

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        atexit.register(self.stop)
        try:
            _start_with_retry("etcd", self._start_etcd)
            self._apiserver = _start_with_retry("kube-apiserver", self._start_apiserver)
            if self.controller_manager:
                _start_with_retry("kube-controller-manager", self._start_controller_manager)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (newest first, but the apiserver and etcd last) and remove the temp dir.

        A restarted apiserver is the newest, yet it must go after its clients: with the controller
        manager's watches still open it takes its whole 10 s of grace to stop.
        Set GPU_SCHEDULER_KEEP_CONTROL_PLANE=1 to keep the dir (logs, certs) for debugging.
        """
        for process in sorted(reversed(self._components), key=lambda p: p.name in ("kube-apiserver", "etcd")):
            process.stop()
        self._components.clear()
        if os.environ.get("GPU_SCHEDULER_KEEP_CONTROL_PLANE") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.stop)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver, as a crash would end it: its open watches break mid-stream."""
        if self._apiserver is not None:
            self._apiserver.popen.kill()
            self._apiserver.popen.wait(10)
            self._discard(self._apiserver)
            self._apiserver = None

    def restart_apiserver(self) -> None:
        """Start kube-apiserver again on the same port with the same certificates and keys, so clients
        made before (and their tokens) work again; returns once it is ready."""
        port = int(self.server.rsplit(":", 1)[1])
        self._apiserver = self._start_apiserver(port)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, as the apiserver's compactor does every
        5 minutes; returns that revision. A watch from an older resourceVersion then gets 410."""
        revision = int(_etcd_call(self.etcd_url, "/v3/kv/range", {"key": _b64(b"\0")})["header"]["revision"])
        _etcd_call(self.etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def _spawn(self, name: str, args: Sequence[str]) -> Process:
        process = Process(name, [str(self.bin_dir / name), *args], self.dir / f"{name}.log")
        self._components.append(process)
        return process

    def _discard(self, process: Process) -> None:
        process.stop()
        self._components.remove(process)

    def _start_etcd(self) -> Process:
        client_port, peer_port = free_port(), free_port()
        data_dir = self.dir / "etcd-data"
        shutil.rmtree(data_dir, ignore_errors=True)
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        process = self._spawn(
            "etcd",
            [
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
            ],
        )
        try:
            _wait_for("etcd /health", lambda: _http_ok(f"{client_url}/health"), process, 30)
        except StartError:
            self._discard(process)
            raise
        self.etcd_url = client_url
        return process

    def _start_apiserver(self, port: int | None = None) -> Process:
        """Start kube-apiserver on `port` (a free one by default); certificates and keys are made
        on the first start and kept for restarts."""
        restart = port is not None
        port = port or free_port()
        pki_dir = self.dir / "pki"
        pki_dir.mkdir(exist_ok=True)
        # --service-account-key-file must hold a public key: a PKCS#8 private key is rejected there.
        sa_key, sa_pub = pki_dir / "sa.key", pki_dir / "sa.pub"
        if not restart:
            serving = pki.issue(
                self.ca,
                "kube-apiserver",
                dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
                ip_addresses=["127.0.0.1", "10.0.0.1"],
                usage="server",
            )
            _write_pair(serving, pki_dir / "apiserver.crt", pki_dir / "apiserver.key")
            signing_key = pki.new_signing_key()
            _write_private(sa_key, signing_key)
            sa_pub.write_bytes(_public_key_pem(signing_key))
        process = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={pki_dir}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--client-ca-file={self.ca_cert}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # No pod here mounts a token (there is no kubelet), and with the plugin a pod created just
                # after its namespace would be refused until the controller manager made `default`.
                "--disable-admission-plugins=ServiceAccount",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                # Not envtest's: without it the apiserver logs an error every 10 s because
                # 127.0.0.1 is not a valid Endpoints address (there is no kube-proxy anyway).
                "--endpoint-reconciler-type=none",
                *self.extra_apiserver_args,
            ],
        )
        if not restart:
            self.server = f"https://127.0.0.1:{port}"
            self.kubeconfig = self.kubeconfig_for("admin", ["system:masters"], name="admin")
        context = self.ssl_context("admin", ["system:masters"])
        try:
            _wait_for(
                "kube-apiserver /readyz",
                lambda: _http_ok(f"{self.server}/readyz", context),
                process,
                self.start_timeout,
            )
            _wait_for(
                "namespace default",
                lambda: _http_ok(f"{self.server}/api/v1/namespaces/default", context),
                process,
                self.start_timeout,
            )
        except StartError:
            self._discard(process)
            raise
        return process

    def _start_controller_manager(self) -> Process:
        """kube-controller-manager as a kubeadm cluster runs it: its own user, each controller with the
        token of its own service account in kube-system (TokenRequest, so RBAC's bootstrap roles for the
        controllers apply), the apiserver's signing key for the token Secrets; ready once every
        controller in `CONTROLLERS` is built and reports in its /healthz."""
        port = free_port()
        kubeconfig = self.kubeconfig_for("system:kube-controller-manager", name="kube-controller-manager")
        process = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                # No --authentication/authorization-kubeconfig: only /healthz is asked for, which it
                # always allows, and delegated authentication wants a request-header CA we do not have.
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'kube-controller-manager-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.dir / 'pki' / 'sa.key'}",
                f"--root-ca-file={self.ca_cert}",
                f"--controllers={','.join(CONTROLLERS)}",
                *self.extra_controller_manager_args,
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz?verbose", timeout=2,
                                        context=insecure) as response:
                body = response.read().decode(errors="replace")
            return all(f"[+]{name} ok" in body for name in CONTROLLERS)

        try:
            _wait_for("kube-controller-manager /healthz with every controller", healthy, process,
                      self.start_timeout)
        except StartError:
            self._discard(process)
            raise
        return process

    # --- users -----------------------------------------------------------------------------

    def _client_pair(self, user: str, groups: Iterable[str]) -> pki.KeyPair:
        return pki.issue(self.ca, user, organizations=list(groups), usage="client")

    def kubeconfig_for(self, user: str, groups: Iterable[str] = (), *, name: str = "") -> Path:
        """A kubeconfig that authenticates as `user` in `groups` (client certificate, embedded)."""
        pair = self._client_pair(user, groups)
        return self._write_kubeconfig(user, {"client-certificate-data": _b64(pair.cert_pem),
                                             "client-key-data": _b64(pair.key_pem)}, name=name)

    def kubeconfig_for_service_account(self, namespace: str, name: str, *, hours: int = 6) -> Path:
        """A kubeconfig with a token of the ServiceAccount from the TokenRequest API, as a Pod of that
        account gets one: the apiserver's own service-account authenticator and RBAC decide what it may do."""
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api_client())
        request = core.create_namespaced_service_account_token(
            name, namespace, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": hours * 3600}})
        return self._write_kubeconfig(f"system:serviceaccount:{namespace}:{name}", {"token": request.status.token})

    def _write_kubeconfig(self, user: str, credentials: dict[str, str], *, name: str = "") -> Path:
        self._kubeconfigs += 1
        path = self.dir / f"{name or f'{_safe(user)}-{self._kubeconfigs}'}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server,
                                                     "certificate-authority-data": _b64(self.ca.cert_pem)}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
        _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
        return path

    def ssl_context(self, user: str, groups: Iterable[str] = ()) -> ssl.SSLContext:
        """An SSL context trusting the apiserver and presenting a client cert, for raw HTTPS."""
        pair = self._client_pair(user, groups)
        cert = self.dir / f"client-{_safe(user)}.crt"
        key = cert.with_suffix(".key")
        _write_pair(pair, cert, key)
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(cert), str(key))
        return context

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A `kubernetes.client.ApiClient` for a kubeconfig (the admin one by default)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    # --- kube-scheduler --------------------------------------------------------------------

    def start_scheduler(self, config_yaml: str = "", *, timeout: float = 60.0, kubeconfig: Path | None = None,
                        leader_elect: bool = False, extra_args: Sequence[str] = ()) -> Scheduler:
        """Start kube-scheduler with a KubeSchedulerConfiguration (v1), and `extra_args` (e.g. feature gates).

        `clientConnection.kubeconfig` is set to `kubeconfig` (default: the admin one), which also
        authenticates and authorizes callers of its endpoints, and leader election is off unless
        `leader_elect`, whatever the given YAML says; everything else (profiles, extenders, the
        Lease's name) is the caller's.
        """
        kubeconfig = kubeconfig or self.kubeconfig
        config: dict[str, Any] = yaml.safe_load(config_yaml) or {}
        config.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        config.setdefault("kind", "KubeSchedulerConfiguration")
        config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
        config.setdefault("leaderElection", {})["leaderElect"] = leader_elect
        index = sum(1 for p in self._components if p.name == "kube-scheduler")
        config_path = self.dir / f"kube-scheduler-{index}.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        cert_dir = self.dir / f"kube-scheduler-{index}-certs"
        holder: dict[str, int] = {}

        def start() -> Process:
            port = free_port()
            process = Process(
                "kube-scheduler",
                [
                    str(self.bin_dir / "kube-scheduler"),
                    f"--config={config_path}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--cert-dir={cert_dir}",
                    *extra_args,
                ],
                self.dir / f"kube-scheduler-{index}.log",
            )
            self._components.append(process)
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed
            try:
                _wait_for(
                    "kube-scheduler /healthz",
                    lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", insecure),
                    process,
                    timeout,
                )
            except StartError:
                self._discard(process)
                raise
            holder["port"] = port
            return process

        process = _start_with_retry("kube-scheduler", start)
        return Scheduler(process, holder["port"], config_path)

    # --- diagnostics -----------------------------------------------------------------------

    def logs_tail(self, n_lines: int = 50) -> str:
        """The last lines of each component's log (stopped ones too), to attach to a failed test."""
        parts = []
        for process in self._components:
            parts.append(
                f"----- {process.log_path.name} (pid {process.pid}) -----\n{process.tail(n_lines)}"
            )
        return "\n".join(parts)


def _etcd_call(etcd_url: str, path: str, body: Mapping[str, Any]) -> Any:
    """One call to etcd's v3 JSON gateway (the gRPC API as POSTs of JSON, keys in base64)."""
    request = urllib.request.Request(f"{etcd_url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _public_key_pem(private_key_pem: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(private_key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _write_pair(pair: pki.KeyPair, cert: Path, key: Path) -> None:
    cert.write_bytes(pair.cert_pem)
    _write_private(key, pair.key_pem)


# --- object helpers (take a kubernetes.client.ApiClient) -------------------------------------


def create_gpu_node(
    api: Any,
    name: str,
    *,
    gpus: int = 8,
    model: str = "NVIDIA-A100-SXM4-40GB",
    memory_mib: int = 40960,
    zone: str = "zone-a",
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] | None = None,
    unschedulable: bool = False,
) -> Any:
    """Create a fake, Ready GPU node the schedulers will place pods on; returns the V1Node.

    Capacity and conditions live in status, so they are set through the status subresource.
    The TaintNodesByCondition admission plugin adds `node.kubernetes.io/not-ready:NoSchedule`
    to every new Node and, with no node-lifecycle controller here, nothing would remove it:
    the spec taints are reset to exactly `taints` afterwards.
    """
    from kubernetes import client

    core: Any = client.CoreV1Api(api)  # Any: the typed client takes these plain-dict bodies fine
    node_labels = {
        "kubernetes.io/hostname": name,
        "gpu.nvidia.com/model": model,
        "gpu.nvidia.com/memory": str(memory_mib),
        "gpu.nvidia.com/count": str(gpus),
        "topology.kubernetes.io/zone": zone,
        **(labels or {}),
    }
    wanted_taints = [dict(t) for t in (taints or [])]
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"unschedulable": unschedulable, "taints": wanted_taints},
        }
    )
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), GPU_RESOURCE: str(gpus)}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node for e2e tests",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )
    # JSON Patch (a list body): taints have no merge key, so replace the list as a whole.
    return core.patch_node(name, [{"op": "add", "path": "/spec/taints", "value": wanted_taints}])


def mark_pod_ready(api: Any, namespace: str, name: str, *, since: float | None = None) -> Any:
    """Make a pod look Running and Ready, as a kubelet would (there is none here); `since` (epoch
    seconds, default now) is when its conditions last changed."""
    from kubernetes import client

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    changed = now if since is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": changed}
        for kind in ("Initialized", "ContainersReady", "Ready")
    ]
    return client.CoreV1Api(api).patch_namespaced_pod_status(
        name,
        namespace,
        {"status": {"phase": "Running", "startTime": now, "conditions": conditions}},
    )
