"""Running `gpu-scheduler run` and `gpu-scheduler extender` against the test control plane, and checks from
API objects alone."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import servers

GPU = "nvidia.com/gpu"
MILLI = "gpu-scheduler.io/gpu-milli"
DEVICES = "gpu-scheduler.io/gpu-devices"
EXTENDER_COMPONENT = Path(__file__).parents[2] / "manifests" / "components" / "extender"
SHIPPED_KUBE_SCHEDULER_CONFIG = EXTENDER_COMPONENT / "kube-scheduler-extender-config.yaml"
OVERLAY_KUBE_SCHEDULER_CONFIG = EXTENDER_COMPONENT / "kube-scheduler-config.yaml"  # the overlay's second scheduler


@dataclass
class SchedulerProcess:
    process: subprocess.Popen[bytes]
    log: Path
    port: int

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, kill: bool = False) -> None:
        servers.stop_process(self.process, kill=kill)


def start_scheduler(kubeconfig: Path, log_dir: Path, *args: str, name: str = "scheduler") -> SchedulerProcess:
    port = servers.free_port()
    log = log_dir / f"{name}-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpu_scheduler", "run", "--kubeconfig", str(kubeconfig), "--port", str(port), *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=os.environ.copy(),
    )
    return SchedulerProcess(process, log, port)


def start_extender(kubeconfig: Path, config_file: Path | None, log_dir: Path, config_map: str | None = None, *,
                   min_nodes: int = 0, port: int | None = None, ready: bool = True,
                   lease: str | None = None) -> SchedulerProcess:
    """`gpu-scheduler extender` on loopback (`port`, else a free one), once /readyz says both watches have
    listed and its model holds at least `min_nodes` nodes (or, without `ready`, once it serves /healthz). Its
    warm-up Lease is `lease`, else one of its own (`default/e2e-extender-<port>`): extenders of other tests
    never contend for the shipped one."""
    source = ["--config", str(config_file)] if config_file else ["--config-map", str(config_map)]
    for _ in range(5):  # another process may take the port between our probe and gunicorn's bind
        chosen = port or servers.free_port()
        log = log_dir / f"extender-{chosen}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "gpu_scheduler", "extender", *source,
             "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(chosen),
             "--lease", lease or f"default/e2e-extender-{chosen}"],
            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=os.environ.copy(),
        )
        server = SchedulerProcess(process, log, chosen)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            try:
                status, body = request(server, "GET", "/readyz" if ready else "/healthz")
                if status == 200 and (not ready or body["nodes"] >= min_nodes):
                    return server
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        server.stop()
        if port is not None or "Address already in use" not in server.logs():
            raise RuntimeError(f"gpu-scheduler extender did not become ready:\n{server.logs()[-6000:]}")
    raise RuntimeError("gpu-scheduler extender could not bind a free port")


def request(server: SchedulerProcess, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        kind = response.getheader("Content-Type") or ""
        return response.status, json.loads(data) if kind.startswith("application/json") else data.decode()
    finally:
        connection.close()


def kube_scheduler_config(port: int, profile: str, *, every_pod: bool = False) -> str:
    """The shipped KubeSchedulerConfiguration, pointed at the extender on loopback and given its own profile;
    `every_pod` sends every pod of the profile through the extender (GPU shares too), with full Nodes."""
    shipped = yaml.safe_load(SHIPPED_KUBE_SCHEDULER_CONFIG.read_text())
    del shipped["clientConnection"]  # the control plane sets its own
    shipped["profiles"] = [{"schedulerName": profile}]
    [extender_config] = shipped["extenders"]
    extender_config["urlPrefix"] = f"http://127.0.0.1:{port}"
    if every_pod:
        del extender_config["managedResources"]
        extender_config["nodeCacheCapable"] = False
    return yaml.safe_dump(shipped)


def overlay_kube_scheduler_config(port: int, profile: str) -> str:
    """The extender overlay's own kube-scheduler configuration (every pod of its profile through the extender, node
    names only), pointed at the extender on loopback and given its own profile."""
    shipped = yaml.safe_load(OVERLAY_KUBE_SCHEDULER_CONFIG.read_text())
    shipped["profiles"] = [{"schedulerName": profile}]
    [extender_config] = shipped["extenders"]
    extender_config["urlPrefix"] = f"http://127.0.0.1:{port}"
    return yaml.safe_dump(shipped)


def api_json(call: Any, *args: Any, **kwargs: Any) -> Any:
    """A list or read call's answer as the API's JSON (plain dicts, annotations as the apiserver holds them)."""
    response = call(*args, _preload_content=False, **kwargs)
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def pod_name(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods that hold their node's resources: bound and not finished."""
    return [p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")]


def whole_gpus(pod: dict[str, Any]) -> int:
    """Whole GPUs the pod declares: its containers' nvidia.com/gpu (requests, defaulting to limits)."""
    total = 0
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        value = str((resources.get("requests") or {}).get(GPU, (resources.get("limits") or {}).get(GPU, "0")))
        total += int(value) if value.isascii() and value.isdigit() else 0
    return total


def share_milli(pod: dict[str, Any]) -> int:
    """The share of one GPU the pod asks for (gpu-scheduler.io/gpu-milli, 1..999), 0 for none."""
    value = str((pod["metadata"].get("annotations") or {}).get(MILLI, ""))
    return int(value) if value.isascii() and value.isdigit() and 0 < int(value) < 1000 else 0


def devices_of(pod: dict[str, Any]) -> list[tuple[int, int]] | None:
    """[(index, milli)] from the devices annotation; None when absent or not of that shape."""
    text = (pod["metadata"].get("annotations") or {}).get(DEVICES)
    if text is None:
        return None
    try:
        raw = json.loads(text)
        devices = [(d["index"], d.get("milli", 1000)) for d in raw]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return devices if all(type(i) is int and type(m) is int for i, m in devices) else None


def allocatable_gpus(node: dict[str, Any]) -> int:
    value = str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0"))
    return int(value) if value.isascii() and value.isdigit() else 0


def capacity_problems(pods: list[dict[str, Any]], nodes: dict[str, dict[str, Any]], *, scheduler: str | None = None,
                      devices: dict[str, list[tuple[int, int]]] | None = None) -> list[str]:
    """GPUs as the bound pods hold them: no node holds more whole GPUs than it has, every recorded GPU exists,
    no GPU is given beyond 1000 thousandths, and a whole GPU is nobody else's. The GPU pods of `scheduler`
    must also carry devices that match their request (n whole GPUs, or one GPU with their share).
    `devices` replaces the annotation of the pods it names (what they held when bound). A pod whose GPUs DRA
    serves (its status names the claim made for them) holds no device-plugin GPU: its claim holds its devices."""
    problems = []
    whole: defaultdict[str, int] = defaultdict(int)
    use: defaultdict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
    for pod in bound(pods):
        name, node = pod_name(pod), pod["spec"]["nodeName"]
        if (pod.get("status") or {}).get("extendedResourceClaimStatus"):
            continue
        gpus, milli = whole_gpus(pod), share_milli(pod)
        held = (devices or {}).get(name, devices_of(pod))
        whole[node] += gpus
        if node not in nodes:
            problems.append(f"{name}: bound to node {node}, which does not exist")
            continue
        wanted = [1000] * gpus if gpus else [milli] if milli else []
        ours = scheduler is not None and pod["spec"].get("schedulerName") == scheduler
        if ours and wanted and (held is None or sorted(m for _, m in held) != wanted
                                or len({i for i, _ in held}) != len(held)):
            problems.append(f"{name} on {node}: devices {held} do not match its request "
                            f"({f'{gpus} whole GPU(s)' if gpus else f'{milli}/1000 of one GPU'})")
        for index, share in held or []:
            if not 0 <= index < allocatable_gpus(nodes[node]):
                problems.append(f"{name}: GPU {index} does not exist on {node}")
            use[(node, index)].append((name, share))
    for node, count in sorted(whole.items()):
        have = allocatable_gpus(nodes[node]) if node in nodes else 0
        if count > have:
            problems.append(f"{node}: {count} whole GPUs bound on {have} allocatable")
    for (node, index), holders in sorted(use.items()):
        total = sum(m for _, m in holders)
        if total > 1000:
            problems.append(f"{node} GPU {index}: given to " + ", ".join(f"{p} ({m})" for p, m in holders)
                            + f" = {total}/1000")
    return problems


def overcommit_problems(core: Any) -> list[str]:
    """Every bound pod's GPUs and devices against its node, from the API objects alone."""
    nodes = {n["metadata"]["name"]: n for n in api_json(core.list_node)["items"]}
    return capacity_problems(api_json(core.list_pod_for_all_namespaces)["items"], nodes)


@contextlib.contextmanager
def ours_and_kube(plane: Any, kubeconfig: Path, work: Path, *, ours: str, kube: str, label: str,
                  kube_args: Sequence[str] = ()) -> Iterator[None]:
    """`gpu-scheduler run` serving schedulerName `ours` (its log attached to failure reports) and kube-scheduler
    serving `kube` (with `kube_args`), side by side on the test control plane, for scenarios that must come out alike
    under both."""
    from tests.e2e.conftest import LOG_SOURCES

    config = work / "config.yaml"
    config.write_text(f"schedulerName: {ours}\n")
    run = start_scheduler(kubeconfig, work, "--config", str(config), name=f"{label}-run")
    LOG_SOURCES.append(lambda: (f"gpu-scheduler run ({label})", run.logs()[-8000:]))
    kube_scheduler = plane.start_scheduler(f"profiles: [{{schedulerName: {kube}}}]\n", extra_args=kube_args)
    try:
        yield
    finally:
        kube_scheduler.stop()
        run.stop()


def bound_node(core: Any, namespace: str, name: str, *, who: str, timeout: float = 60) -> str:
    """The node the pod is bound to, once it is; on timeout the error quotes its PodScheduled message."""
    from tests.e2e.installing import wait_for

    found: dict[str, Any] = {}

    def bound() -> bool:
        pod = core.read_namespaced_pod(name, namespace)
        found["node"] = pod.spec.node_name
        found["why"] = next((c.message for c in pod.status.conditions or () if c.type == "PodScheduled"), None)
        return bool(found["node"])
    try:
        wait_for(bound, f"{who}: pod {name} to be bound", timeout=timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}; PodScheduled says {found.get('why')!r}") from None
    return found["node"]


def waiting_message(core: Any, namespace: str, name: str, reason: str = "", *, who: str, timeout: float = 30) -> str:
    """The pod's PodScheduled=False message once it names `reason`; the pod must stay unbound meanwhile."""
    from tests.e2e.installing import wait_for

    found: dict[str, str] = {}

    def says() -> bool:
        pod = core.read_namespaced_pod(name, namespace)
        assert not pod.spec.node_name, f"{who}: {name} was bound to {pod.spec.node_name}"
        condition = next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)
        found["message"] = condition.message if condition is not None else ""
        return condition is not None and condition.status == "False" and reason in (condition.message or "")
    try:
        wait_for(says, f"{who}: {name} to wait with {reason!r}", timeout=timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}; last message: {found.get('message')!r}") from None
    return found["message"]
