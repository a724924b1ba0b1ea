"""Asking the real kube-scheduler whether it would have bound a pod where ours did.

`gpu-scheduler run` schedules a seeded scenario (nodes across zones, groups of GPU pods with pod
anti-affinity, affinity, spread constraints and host ports). Then, for every pod it bound, the pod is
replaced by a copy for kube-scheduler that may go only to the same node: kube-scheduler runs all of its
own filters over the cluster as it is, and only then asks the pinning extender below, which keeps the
one node named in the copy's annotation. Bound there means kube-scheduler's filters accept that node in
that state; `PodScheduled=False` means they refuse it, with kube-scheduler's own message. The spread
and affinity arithmetic still sees every node, because the pin is an extender, not a node selector.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import controlplane as cp
from tests.e2e import scheduling

PIN = "parity.e2e/pin"  # the node a copy may go to
POOL_LABEL = "parity-pool"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


class PinningExtender:
    """kube-scheduler's filter extender that keeps only the node a pod's PIN annotation names (all nodes
    for a pod without one). Served on loopback from a thread of the test process."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _PinHandler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="pinning-extender", daemon=True)

    def start(self) -> PinningExtender:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def config(self, *profiles: str) -> str:
        """A KubeSchedulerConfiguration: `profiles` (kube-scheduler's default plugins) and this extender."""
        return json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": name} for name in profiles],
            "extenders": [{"urlPrefix": f"http://127.0.0.1:{self.port}", "filterVerb": "filter",
                           "nodeCacheCapable": True, "weight": 1}],
        })


class _PinHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        names = args.get("NodeNames") or []
        pin = ((args.get("Pod") or {}).get("metadata", {}).get("annotations") or {}).get(PIN)
        kept = names if pin is None else [name for name in names if name == pin]
        failed = {name: f"pinned to {pin}" for name in names if name not in kept}
        body = json.dumps({"NodeNames": kept, "FailedNodes": failed, "Error": ""}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass(frozen=True)
class Scenario:
    """Nodes and pod bodies for one seed; the pods' schedulerName and pool are filled in per run."""

    seed: int
    nodes: list[dict[str, Any]]  # create_gpu_node keyword arguments, without the pool label
    pods: list[dict[str, Any]]  # Pod bodies in creation order

    @staticmethod
    def generate(seed: int, *, nodes: int = 12, zones: int = 3) -> Scenario:
        rng = random.Random(seed)
        node_specs = [{"name": f"n{i:02d}", "gpus": rng.choice([4, 4, 8]), "zone": f"zone-{i % zones}", "cpu": "16",
                       "taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}] if i == 0 else None}
                      for i in range(nodes)]
        bodies: list[dict[str, Any]] = []
        groups = ["anti", "near-db", "db", "ports", "spread", "plain"]
        for group in rng.sample(groups, len(groups)):
            for index in range(rng.randint(4, 9)):
                bodies.append(_member(group, index, rng))
        rng.shuffle(bodies)  # pods needing a db pod near may come before any: they wait, then follow
        return Scenario(seed, node_specs, bodies)

    def create_nodes(self, api: Any, pool: str) -> list[str]:
        names = []
        for spec in self.nodes:
            name = f"{pool}-{spec['name']}"
            cp.create_gpu_node(api, name, gpus=spec["gpus"], zone=spec["zone"], cpu=spec["cpu"],
                               labels={POOL_LABEL: pool}, taints=spec["taints"])
            names.append(name)
        return names

    def bodies(self, scheduler: str, pool: str) -> list[dict[str, Any]]:
        found = json.loads(json.dumps(self.pods))
        for body in found:
            body["spec"]["schedulerName"] = scheduler
            body["spec"]["nodeSelector"] = {POOL_LABEL: pool}
        return found


def _member(group: str, index: int, rng: random.Random) -> dict[str, Any]:
    """One pod of `group`: 1 whole GPU (sometimes 2) and the group's constraint."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {
        "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {cp.GPU_RESOURCE: str(rng.choice([1, 1, 2]))}}}],
        "terminationGracePeriodSeconds": 0}
    selector = {"matchLabels": {"app": group}}
    if group == "anti":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": HOSTNAME}]}}
    elif group == "near-db":
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}
    elif group == "ports":
        spec["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    elif group == "spread":
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": selector}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "labels": {"app": group}, "annotations": {}}, "spec": spec}


QUIET = 12.0  # seconds without a new binding: past both schedulers' longest backoff (10 s) after a retry


def settled(core: Any, namespace: str, timeout: float = 120.0) -> dict[str, dict[str, Any]]:
    """The namespace's pods by name once each is bound or refused with a reason and no pod has been bound for
    QUIET seconds: a refused pod is tried again after a backoff when another pod lands (the one it needs near)."""
    deadline = time.monotonic() + timeout
    last_bound: frozenset[str] = frozenset()
    quiet_since = time.monotonic()
    while True:
        pods = {p["metadata"]["name"]: p for p in scheduling.api_json(core.list_namespaced_pod, namespace)["items"]}
        bound = frozenset(name for name, pod in pods.items() if pod["spec"].get("nodeName"))
        if bound != last_bound:
            last_bound, quiet_since = bound, time.monotonic()
        waiting = [name for name, pod in pods.items() if name not in bound and refusal(pod) is None]
        if not waiting and time.monotonic() - quiet_since >= QUIET:
            return pods
        if time.monotonic() > deadline:
            raise AssertionError(f"{namespace}: not settled within {timeout:.0f}s; waiting without a reason: {waiting}")
        time.sleep(0.5)


def refusal(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message") or condition.get("reason"))
    return None


def ask_kube_scheduler(core: Any, namespace: str, pod: dict[str, Any], body: dict[str, Any], profile: str, *,
                       pin: str | None, timeout: float = 30.0) -> tuple[str | None, str | None]:
    """Replace `pod` by a copy of `body` for kube-scheduler's `profile`, pinned to `pin` (or free): (the node
    kube-scheduler bound it to, None) or (None, kube-scheduler's message)."""
    name = pod["metadata"]["name"]
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as err:
        if err.status != 404:
            raise
    copy = json.loads(json.dumps(body))
    copy["spec"]["schedulerName"] = profile
    if pin is not None:
        copy["metadata"]["annotations"][PIN] = pin
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.create_namespaced_pod(namespace, copy)
            break
        except ApiException as err:
            if err.status != 409 or time.monotonic() > deadline:  # 409: the old one is still being deleted
                raise
            time.sleep(0.1)
    while time.monotonic() < deadline:
        seen = scheduling.api_json(core.read_namespaced_pod, name, namespace)
        if pin is None and (seen["spec"].get("nodeName") or refusal(seen) is not None):
            # an offer, not a replacement: the state stays ours' final one for the next pod offered
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        if seen["spec"].get("nodeName"):
            return seen["spec"]["nodeName"], None
        message = refusal(seen)
        if message is not None:
            return None, message
        time.sleep(0.1)
    return None, f"neither bound nor refused by kube-scheduler within {timeout:.0f}s"


def wait_until_modelled(process: scheduling.SchedulerProcess, gpus: dict[str, int], timeout: float = 60.0) -> None:
    """Until `gpu-scheduler run` counts each node with its GPUs (its /metrics, gpu_scheduler_gpus)."""
    deadline = time.monotonic() + timeout
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{process.port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            text = ""  # not serving yet
        seen = {sample.labels["node"]: sample.value for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == "gpu_scheduler_gpus"}
        if all(seen.get(node) == count for node, count in gpus.items()):
            return
        time.sleep(0.2)
    missing = sorted(node for node, count in gpus.items() if seen.get(node) != count)
    raise AssertionError(f"gpu-scheduler run did not count these nodes' GPUs within {timeout:.0f}s: {missing}\n"
                         f"{process.logs()[-4000:]}")


def gpus_on(core: Any, node: str) -> str:
    """The node's allocatable GPUs and the pods bound there with theirs, for a message."""
    allocatable = scheduling.api_json(core.read_node, node)["status"]["allocatable"].get(cp.GPU_RESOURCE)
    pods = scheduling.api_json(core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")["items"]
    held = ", ".join(f"{p['metadata']['name']}={scheduling.whole_gpus(p)}"
                     f"{'(deleting)' if p['metadata'].get('deletionTimestamp') else ''}" for p in pods)
    return f"{node} has {allocatable} GPUs; pods there: {held}"


@dataclass(frozen=True)
class Outcome:
    """One seed's comparison: what ours bound and left pending, what kube-scheduler says of it."""

    seed: int
    pods: int
    bound: int
    left: dict[str, str]  # pods ours left pending, with its reason
    refused: list[str]  # bindings of ours kube-scheduler's filters refuse, each with its message
    placeable: list[str]  # pods ours left pending that kube-scheduler places in ours' final state
    kube_pending: int  # pods kube-scheduler alone left pending, from the same start
    overcommitted: list[str]

    @property
    def pending(self) -> int:
        return len(self.left)

    @property
    def missed(self) -> list[str]:
        """Pods ours left pending for no reason of its own, yet kube-scheduler places: a divergence."""
        return [f"{name}: {self.left[name]}" for name in self.placeable]

    def summary(self) -> str:
        return (f"seed {self.seed}: {self.pods} pods; ours bound {self.bound}, left {self.pending} pending "
                f"({len(self.placeable)} that kube-scheduler then placed); kube-scheduler alone left "
                f"{self.kube_pending} pending; {len(self.refused)} of ours refused by it")


def compare(api: Any, seed: int, *, prefix: str, ours: str, kube: str,
            start_ours: Callable[[], scheduling.SchedulerProcess], stop_ours: Callable[[], None]) -> Outcome:
    """Schedule seed's scenario once by `gpu-scheduler run` (schedulerName `ours`, started and stopped by the
    callables) and once by kube-scheduler (profile `kube`, with the pinning extender), each on its own pool of
    nodes, both at once; then ask kube-scheduler about every binding of ours and every pod ours left pending.

    Both start from the same state: the nodes made and held by both schedulers' models before the first pod. ours
    starts as its pool's nodes are made and is waited for, as kube-scheduler runs throughout: pods made before ours
    had listed would reach it in one list, in name order, and not one by one in creation order as kube-scheduler
    sees them (with 12 nodes that order alone left up to 8 more pods pending in a seed)."""
    core: Any = client.CoreV1Api(api)
    scenario = Scenario.generate(seed)
    process = start_ours()
    pools = {way: f"{prefix}-{seed}-{way}" for way in ("ours", "kube")}
    for pool in pools.values():
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": pool}})
    made = {way: scenario.create_nodes(api, pool) for way, pool in pools.items()}
    wait_until_modelled(process, dict(zip(made["ours"], (spec["gpus"] for spec in scenario.nodes))))
    for way, scheduler in (("ours", ours), ("kube", kube)):
        for body in scenario.bodies(scheduler, pools[way]):
            core.create_namespaced_pod(pools[way], body)
    runs = {way: (f"{prefix}-{seed}-{way}", settled(core, f"{prefix}-{seed}-{way}")) for way in ("ours", "kube")}
    # stopped before kube-scheduler is asked: else it would fill the room a replaced pod leaves with a pod it
    # had left pending, before the pinned copy gets there
    stop_ours()
    namespace, found = runs["ours"]
    bodies = {body["metadata"]["name"]: body for body in scenario.bodies(kube, namespace)}
    overcommitted = scheduling.overcommit_problems(core)
    refused = []
    bound = {name: pod["spec"]["nodeName"] for name, pod in found.items() if pod["spec"].get("nodeName")}
    for name, node in sorted(bound.items()):
        placed, message = ask_kube_scheduler(core, namespace, found[name], bodies[name], kube, pin=node)
        if placed != node:
            refused.append(f"{name} on {node}: kube-scheduler says {message}; {gpus_on(core, node)}")
    left = {name: refusal(found[name]) or "no reason given" for name in sorted(found) if name not in bound}
    placeable = []
    for name in left:  # offered to kube-scheduler in ours' final state, then taken away again
        placed, _ = ask_kube_scheduler(core, namespace, found[name], bodies[name], kube, pin=None)
        if placed is not None:
            placeable.append(name)
    kube_pending = sum(1 for pod in runs["kube"][1].values() if not pod["spec"].get("nodeName"))
    return Outcome(seed, len(scenario.pods), len(bound), left, refused, placeable, kube_pending, overcommitted)
