"""Shared tools of the chaos and adversarial suites: a slow proxy, the schedulers under test, and the
invariants checked from API objects alone.

A scheduler is judged by what a user can see: the pods, their nodes, the devices annotation the
binding wrote, the PodScheduled condition, the events, and the `gpu_scheduler_allocated_gpus` metric
against the pods that are really bound. Each check returns readable problems (naming pods, nodes and
GPU devices) rather than asserting, so a test can report every broken invariant at once.
"""

from __future__ import annotations

import asyncio
import calendar
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import controlplane as cp
from tests.e2e import scheduling

HOSTNAME = "kubernetes.io/hostname"
POOL_LABEL = "e2e-pool"
GRACE_SECONDS = 2.0  # a binding this long after a cordon or deletion may have been decided before it


# --- a slow network between a scheduler and the apiserver ----------------------------------------


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk `latency` seconds in each direction.

    TLS passes through untouched (the apiserver's certificate has an IP SAN for 127.0.0.1), so a
    kubeconfig whose server is the proxy works as it is. Bounded: at most `max_connections` at once
    (more are refused) and `max_chunks` queued per direction (the reader waits). `sever()` cuts every
    open connection with a reset, as a broken network would: open watches and requests in flight fail.
    One event loop on one daemon thread serves everything.
    """

    def __init__(self, upstream: str, *, latency: float = 0.0, max_connections: int = 256, max_chunks: int = 256):
        host, port = upstream.removeprefix("https://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.latency = latency
        self.max_connections = max_connections
        self.max_chunks = max_chunks
        self.port = 0
        self.connections = 0  # accepted so far, for diagnostics
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> LatencyProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def sever(self) -> int:
        """Reset every open connection, both sides; returns how many were open."""

        async def cut() -> int:
            writers = list(self._open)
            for writer in writers:
                writer.transport.abort()
            return len(writers) // 2

        return int(self._call(cut()))

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._open):
                writer.transport.abort()
            # ended here, not garbage-collected on a stopped loop (where they warn "coroutine ignored GeneratorExit")
            serving = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in serving:
                task.cancel()
            await asyncio.gather(*serving, return_exceptions=True)

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def kubeconfig(self, original: Path, out: Path) -> Path:
        """A copy of `original` whose clusters all point at the proxy."""
        config = yaml.safe_load(original.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        out.chmod(0o600)
        return out

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if len(self._open) // 2 >= self.max_connections:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 10)
        except (OSError, asyncio.TimeoutError):
            client_writer.transport.abort()
            return
        self._open.update((client_writer, upstream_writer))
        pipes = [asyncio.ensure_future(self._pipe(client_reader, upstream_writer)),
                 asyncio.ensure_future(self._pipe(upstream_reader, client_writer))]
        try:
            # HTTP clients and the apiserver close both ways at once: the first side to end ends the connection
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for writer in (client_writer, upstream_writer):
                self._open.discard(writer)
                writer.transport.abort()
            await asyncio.gather(*pipes, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction, each chunk sent `latency` seconds after it was read, in order; returns once
        the reader ended and what it read is sent, or either side failed."""
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await chunks.get()
                if not data:
                    return
                delay = due - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while not sender.done() and (data := await reader.read(65536)):
                chunks.put_nowait((self._loop.time() + self.latency, data))
                while chunks.qsize() >= self.max_chunks and not sender.done():
                    await asyncio.sleep(0.01)
        except OSError:
            sender.cancel()
        finally:
            chunks.put_nowait((0.0, b""))
            await asyncio.gather(sender, return_exceptions=True)


# --- processes -------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The PIDs whose parent is `pid` (gunicorn's workers under its master)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields after the last ')' are fixed
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def rss_mib(pids: Iterable[int]) -> float:
    """Resident memory of the processes together (VmRSS from /proc/PID/status), in MiB; gone ones count 0."""
    total_kib = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total_kib += int(found.group(1)) if found else 0
    return total_kib / 1024


def kill_tree(process: Any) -> None:
    """SIGKILL a subprocess and its children at once, as a node losing power would end them."""
    pids = [*children(process.pid), process.pid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2:].split()[0]


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a plain-HTTP GET on loopback; (0, why) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")
    except OSError as err:
        return 0, str(err)


# --- the schedulers under test ---------------------------------------------------------------------


class _Served:
    """What both schedulers under test answer on their port, and how they end."""

    health_path = "/healthz"
    process: scheduling.SchedulerProcess | None = None

    def _running(self) -> scheduling.SchedulerProcess:
        assert self.process is not None, "the scheduler was not started"
        return self.process

    def health(self) -> tuple[int, str]:
        return http_get(self._running().port, self.health_path)

    def metrics(self) -> str:
        status, body = http_get(self._running().port, "/metrics")
        return body if status == 200 else ""

    def pids(self) -> list[int]:
        pid = self._running().process.pid
        return [pid, *children(pid)]

    def kill(self) -> None:
        kill_tree(self._running().process)


class RunScheduler(_Served):
    """`gpu-scheduler run` as a subprocess (tests/e2e/scheduling.py), killed and restarted on demand."""

    mode = "run"

    def __init__(self, kubeconfig: Path, config_file: Path, log_dir: Path, *, name: str):
        self.kubeconfig = kubeconfig
        self.config_file = config_file
        self.log_dir = log_dir
        self.name = name
        self.starts = 0

    def start(self) -> RunScheduler:
        self.starts += 1
        process = self.process = scheduling.start_scheduler(self.kubeconfig, self.log_dir, "--config",
                                                            str(self.config_file), name=f"{self.name}-{self.starts}")
        deadline = time.monotonic() + 30
        while http_get(process.port, "/healthz")[0] == 0:  # answering at all: the caller judges the answer
            if process.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gpu-scheduler run did not serve /healthz:\n{process.logs()[-4000:]}")
            time.sleep(0.1)
        return self

    def restart(self, *, ready: bool = True) -> None:
        """A new process (`ready` is for symmetry: `run` answers /healthz as soon as it starts)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def logs(self) -> str:
        """The tails of the last two processes' logs (the one killed or restarted, and the one running)."""
        paths = sorted(self.log_dir.glob(f"{self.name}-*.log"), key=lambda path: path.stat().st_mtime)[-2:]
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-6000:]}" for path in paths)


class ExtenderScheduler(_Served):
    """`gpu-scheduler extender` behind the real kube-scheduler, one profile that sends every pod through it
    (shares included); the extender can be killed and restarted on its port while kube-scheduler runs on.
    Its health is /readyz: the process serves and both watches have listed (/healthz only says it serves)."""

    mode = "extender"
    health_path = "/readyz"

    def __init__(self, plane: cp.ControlPlane, kubeconfig: Path, config_file: Path, log_dir: Path, *,
                 profile: str, min_nodes: int, kube_scheduler_kubeconfig: Path | None = None):
        self.plane = plane
        self.kubeconfig = kubeconfig  # the extender's
        self.kube_scheduler_kubeconfig = kube_scheduler_kubeconfig or kubeconfig
        self.config_file = config_file
        self.log_dir = log_dir
        self.profile = profile
        self.min_nodes = min_nodes
        self.kube_scheduler: cp.Scheduler | None = None

    def start(self) -> ExtenderScheduler:
        self.process = scheduling.start_extender(self.kubeconfig, self.config_file, self.log_dir,
                                                 min_nodes=self.min_nodes)
        self.kube_scheduler = self.plane.start_scheduler(
            scheduling.kube_scheduler_config(self.process.port, self.profile, every_pod=True),
            kubeconfig=self.kube_scheduler_kubeconfig)
        return self

    def restart(self, *, ready: bool = True) -> None:
        """The extender again on the same port (kube-scheduler's configuration names it); without `ready`,
        return once it serves, listed or not."""
        port = self._running().port
        self._running().stop()
        self.process = scheduling.start_extender(self.kubeconfig, self.config_file, self.log_dir,
                                                 min_nodes=self.min_nodes, port=port, ready=ready)

    def stop(self) -> None:
        if self.kube_scheduler is not None:
            self.kube_scheduler.stop()
        if self.process is not None:
            self.process.stop()

    def logs(self) -> str:
        parts = [f"--- {path.name}\n{path.read_text(errors='replace')[-6000:]}"
                 for path in sorted(self.log_dir.glob("extender-*.log"))]
        if self.kube_scheduler is not None:
            noise = "extension-apiserver-authentication"  # no requestheader CA here: logged again and again
            lines = [line for line in self.kube_scheduler.process.tail(400).splitlines() if noise not in line]
            parts.append("--- kube-scheduler\n" + "\n".join(lines[-30:]))
        return "\n".join(parts)


Scheduler = RunScheduler | ExtenderScheduler


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    total = 0.0
    for sample_labels, value in _samples(text, name):
        if all(sample_labels.get(key) == wanted for key, wanted in labels.items()):
            total += value
    return total


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        matched = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if matched:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', matched.group(1) or ""))
            found.append((labels, float(matched.group(2))))
    return found


# --- pods --------------------------------------------------------------------------------------------


def gpu_pod(name: str, scheduler: str, pool: str, *, gpus: int = 0, milli: int = 0, host: str | None = None,
            annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod of `scheduler` in label pool `pool`: `gpus` whole GPUs or a `milli` share; `host` pins it."""
    metadata_annotations = dict(annotations or {})
    limits = {scheduling.GPU: str(gpus)} if gpus else {}
    if milli:
        metadata_annotations[scheduling.MILLI] = str(milli)
    selector = {POOL_LABEL: pool, **({HOSTNAME: host} if host else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": metadata_annotations},
            "spec": {"schedulerName": scheduler, "nodeSelector": selector, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {
                         "requests": {"cpu": "100m", "memory": "128Mi"}, "limits": limits}}]}}


def random_shape(rng: random.Random) -> tuple[int, int]:
    """(whole GPUs, share in thousandths), one of them 0: mostly single GPUs and shares, some pairs and fours."""
    roll = rng.random()
    if roll < 0.4:
        return 0, rng.choice((250, 300, 500, 700))
    if roll < 0.8:
        return 1, 0
    return (2, 0) if roll < 0.93 else (4, 0)


def create_pods(core: Any, namespace: str, bodies: Sequence[Mapping[str, Any]], *, threads: int = 8) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))


# --- what the API shows --------------------------------------------------------------------------


@dataclass
class Outages:
    """When the test took nodes away (cordon, delete) and gave them back, by its own wall clock."""

    windows: dict[str, list[list[float]]] = field(default_factory=dict)  # node -> [[from, until or inf]]

    def took_away(self, node: str) -> None:
        spans = self.windows.setdefault(node, [])
        if not spans or spans[-1][1] != float("inf"):
            spans.append([time.time(), float("inf")])

    def gave_back(self, node: str) -> None:
        spans = self.windows.get(node)
        if spans and spans[-1][1] == float("inf"):
            spans[-1][1] = time.time()

    def unavailable(self, node: str, bound_at: float) -> tuple[float, float] | None:
        """The outage a binding at `bound_at` fell into, past the grace. The API records whole seconds, so
        the binding happened in [bound_at, bound_at + 1): only one surely inside the outage counts."""
        for start, end in self.windows.get(node, []):
            if bound_at > start + GRACE_SECONDS and bound_at + 1 <= end:
                return start, end
        return None


@dataclass(frozen=True)
class Snapshot:
    nodes: dict[str, dict[str, Any]]
    pods: list[dict[str, Any]]  # of the namespaces asked for
    events: list[dict[str, Any]]


def snapshot(core: Any, namespaces: Sequence[str]) -> Snapshot:
    nodes = {n["metadata"]["name"]: n for n in scheduling.api_json(core.list_node)["items"]}
    pods, events = [], []
    for namespace in namespaces:
        pods += scheduling.api_json(core.list_namespaced_pod, namespace)["items"]
        events += scheduling.api_json(core.list_namespaced_event, namespace)["items"]
    return Snapshot(nodes, pods, events)


def bind_time(pod: dict[str, Any]) -> float | None:
    """When the apiserver recorded the binding (PodScheduled=True), as Unix seconds."""
    for condition in pod["status"].get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "True" and condition.get("lastTransitionTime"):
            return float(calendar.timegm(time.strptime(condition["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")))
    return None


def outage_problems(state: Snapshot, outages: Outages) -> list[str]:
    """Bindings to a node more than GRACE_SECONDS after the test cordoned or deleted it, before it came back."""
    problems = []
    for pod in scheduling.bound(state.pods):
        node, at = pod["spec"]["nodeName"], bind_time(pod)
        window = None if at is None else outages.unavailable(node, at)
        if at is not None and window is not None:
            problems.append(f"{scheduling.pod_name(pod)}: bound to {node} at {_clock(at)}, {at - window[0]:.1f}s "
                            f"after the test cordoned or deleted it ({_clock(window[0])}; back at {_clock(window[1])})")
    return problems


def _clock(at: float) -> str:
    return "never" if at == float("inf") else time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at * 10) % 10}"


_ASSIGNED = re.compile(r"^Successfully assigned (\S+) to (\S+)$")


def event_problems(state: Snapshot) -> list[str]:
    """Each bound pod was bound once: at most one Scheduled event for its UID, naming its node."""
    scheduled: defaultdict[str, list[str]] = defaultdict(list)
    for event in state.events:
        matched = _ASSIGNED.match(event.get("message") or "")
        if event.get("reason") == "Scheduled" and matched:
            scheduled[(event.get("involvedObject") or {}).get("uid") or ""].append(matched.group(2))
    problems = []
    for pod in scheduling.bound(state.pods):
        nodes = scheduled.get(pod["metadata"]["uid"], [])
        if len(nodes) > 1 or any(node != pod["spec"]["nodeName"] for node in nodes):
            problems.append(f"{scheduling.pod_name(pod)} (bound to {pod['spec']['nodeName']}): "
                            f"Scheduled events to {nodes}")
    return problems


def free_milli(state: Snapshot) -> dict[str, list[int]]:
    """node -> the free thousandths of each GPU, by the bound pods' devices annotations; a GPU pod without
    devices takes idle GPUs from the end."""
    free = {name: [1000] * scheduling.allocatable_gpus(node) for name, node in state.nodes.items()}
    unrecorded: defaultdict[str, int] = defaultdict(int)
    for pod in scheduling.bound(state.pods):
        node, devices = pod["spec"]["nodeName"], scheduling.devices_of(pod)
        if devices is None:
            unrecorded[node] += scheduling.whole_gpus(pod)
        for index, milli in devices or []:
            if node in free and 0 <= index < len(free[node]):
                free[node][index] -= milli
    for node, count in unrecorded.items():
        idle = [i for i, f in enumerate(free.get(node, [])) if f == 1000]
        for index in idle[::-1][:count]:
            free[node][index] = 0
    return free


def _usable(node: dict[str, Any]) -> bool:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    hard = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return ready and not spec.get("unschedulable") and not hard


def pending_problems(state: Snapshot, scheduler: str) -> list[str]:
    """Every pending pod of `scheduler` fits nowhere, by the API's bound pods, and says why
    (PodScheduled=False with a message)."""
    free = free_milli(state)
    problems = []
    for pod in state.pods:
        if pod["spec"].get("nodeName") or pod["spec"].get("schedulerName") != scheduler:
            continue
        gpus, milli = scheduling.whole_gpus(pod), scheduling.share_milli(pod)
        selector = pod["spec"].get("nodeSelector") or {}
        for name, node in sorted(state.nodes.items()):
            labels = node["metadata"].get("labels") or {}
            if not _usable(node) or any(labels.get(k) != v for k, v in selector.items()):
                continue
            idle = sum(1 for f in free[name] if f == 1000)
            if (gpus and idle >= gpus) or (milli and any(f >= milli for f in free[name])):
                problems.append(f"{scheduling.pod_name(pod)} ({f'{gpus} GPU(s)' if gpus else f'{milli}/1000'}) is "
                                f"pending though {name} has {idle} idle GPU(s), free thousandths {free[name]}")
                break
        else:
            condition = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
            if condition is None or condition["status"] != "False" or not condition.get("message"):
                problems.append(f"{scheduling.pod_name(pod)} is pending without a reason (PodScheduled: {condition})")
    return problems


def model_problems(state: Snapshot, metrics_text: str, nodes: Iterable[str]) -> list[str] | None:
    """`gpu_scheduler_allocated_gpus{node}` against the API's bound pods on each of `nodes` (whole GPUs 1.0,
    shares milli/1000); None when the scheduler does not export the metric."""
    if "gpu_scheduler_allocated_gpus" not in metrics_text:
        return None
    exported: defaultdict[str, float] = defaultdict(float)
    for labels, value in _samples(metrics_text, "gpu_scheduler_allocated_gpus"):
        exported[labels.get("node", "")] += value
    held: defaultdict[str, float] = defaultdict(float)
    for pod in scheduling.bound(state.pods):
        devices = scheduling.devices_of(pod)
        amount = sum(m for _, m in devices) / 1000 if devices is not None else float(scheduling.whole_gpus(pod))
        held[pod["spec"]["nodeName"]] += amount
    problems = []
    for node in sorted(nodes):
        api = held[node] if node in state.nodes else 0.0
        if abs(exported[node] - api) > 1e-6:
            problems.append(f"{node}: the scheduler counts {exported[node]:g} GPUs allocated, "
                            f"the API's bound pods hold {api:g}")
    return problems


def held_problems(state: Snapshot, *, trusted: dict[str, list[tuple[int, int]]]) -> list[str]:
    """GPUs taken from under a pod's declared request. A pod that declares whole GPUs holds that many, whatever
    devices its annotation names (a tenant can write any); the `trusted` pods (bound by the scheduler, with
    the devices seen at binding) need their own GPUs besides. On a node where trusted pods hold GPUs, the
    whole GPUs declared plus the GPUs trusted shares sit on must not exceed what the node has."""
    problems = []
    on_node: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in scheduling.bound(state.pods):
        on_node[pod["spec"]["nodeName"]].append(pod)
    for node, pods in sorted(on_node.items()):
        mine = [p for p in pods if scheduling.pod_name(p) in trusted]
        if not mine or node not in state.nodes:
            continue
        whole = sum(scheduling.whole_gpus(p) for p in pods)
        shared = {index for p in mine if not scheduling.whole_gpus(p) for index, _ in trusted[scheduling.pod_name(p)]}
        have = scheduling.allocatable_gpus(state.nodes[node])
        if whole + len(shared) > have:
            holders = ", ".join(f"{scheduling.pod_name(p)} ({scheduling.whole_gpus(p)})" for p in pods
                                if scheduling.whole_gpus(p))
            problems.append(f"{node}: {whole} whole GPUs declared ({holders}) and trusted shares on GPUs "
                            f"{sorted(shared)}: {whole + len(shared)} GPUs needed, {have} allocatable")
    return problems


@dataclass
class Verdict:
    """What one look at the API found wrong, split by whether waiting could mend it."""

    broken: list[str]  # cannot heal by waiting: overcommit, bindings to a removed node, double bindings
    unsettled: list[str]  # should heal soon: pods that fit but wait, missing reasons, a model behind the API
    notes: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return self.broken + self.unsettled


def settle(observe: Callable[[], Verdict], *, timeout: float, after_broken: float = 15.0) -> Verdict:
    """Observe until nothing is unsettled or `timeout` runs out; once something is broken for good, wait
    at most `after_broken` seconds more, for the rest of the verdict to be final."""
    deadline = time.monotonic() + timeout
    while True:
        verdict = observe()
        if not verdict.unsettled or time.monotonic() > deadline:
            return verdict
        if verdict.broken:
            deadline = min(deadline, time.monotonic() + after_broken)
        time.sleep(0.5)


# --- node pools --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """Fake GPU nodes that only pods selecting `e2e-pool: label` land on; node name -> GPUs."""

    label: str
    gpus: dict[str, int]

    @classmethod
    def named(cls, label: str, sizes: Sequence[int]) -> Pool:
        return cls(label, {f"{label}-{i:02d}": size for i, size in enumerate(sizes)})

    @property
    def names(self) -> list[str]:
        return list(self.gpus)

    def register(self, api: Any, name: str) -> None:
        """Create (or re-create, under the same name) the node, Ready and untainted."""
        cp.create_gpu_node(api, name, gpus=self.gpus[name], labels={POOL_LABEL: self.label})

    def create(self, api: Any) -> Pool:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda name: self.register(api, name), self.names))
        return self
