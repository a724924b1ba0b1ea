"""Chaos on the real control plane, against `gpu-scheduler run` and against `gpu-scheduler extender` behind
the real kube-scheduler: the apiserver killed mid-burst, watches expired by etcd compaction, nodes deleted,
cordoned and re-registered under their names, pods re-created under their names while their bindings are
in flight, and the scheduler itself killed.

After each, the API objects alone must show: every pod that fits is bound, once; no GPU or share given
beyond capacity; no binding to a node more than 2 s after the test cordoned or deleted it; pending pods
say why; and the scheduler's `gpu_scheduler_allocated_gpus` equals what the bound pods hold. Workloads are
seeded (whole GPUs and shares mixed), every wait has a deadline, and each scenario has its own namespace,
scheduler name and scheduler processes, on one pool of 20 nodes per control plane.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import chaos, conftest
from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e import scheduling

MODES = ("run", "extender")
SIZES = [8] * 12 + [4] * 8  # 128 GPUs
SEED = 20240612
SETTLE_SECONDS = 60


def _own_plane(title: str, *args: str) -> Iterator[cp.ControlPlane]:
    conftest.require_binaries()
    with cp.ControlPlane(extra_apiserver_args=args) as control_plane:
        def logs() -> tuple[str, str]:
            return title, control_plane.logs_tail(30)

        conftest.LOG_SOURCES.append(logs)
        yield control_plane
        conftest.LOG_SOURCES.remove(logs)


@pytest.fixture(scope="module")
def plane() -> Iterator[cp.ControlPlane]:
    """Its own control plane: the apiserver is killed here, and other modules' processes must not notice."""
    yield from _own_plane("chaos control plane")


@pytest.fixture(scope="module")
def uncached_plane() -> Iterator[cp.ControlPlane]:
    """Without the watch cache every watch is served from etcd, so a compacted resourceVersion gives 410."""
    yield from _own_plane("chaos control plane without watch cache", "--watch-cache=false")


@pytest.fixture(scope="module")
def pool(plane: cp.ControlPlane) -> chaos.Pool:
    return chaos.Pool.named("chaos", SIZES).create(plane.api_client())


@pytest.fixture(scope="module")
def uncached_pool(uncached_plane: cp.ControlPlane) -> chaos.Pool:
    return chaos.Pool.named("uncached", SIZES).create(uncached_plane.api_client())


@dataclass
class Scenario:
    """One scenario's namespace, workload and scheduler, and the verdict from the API afterwards."""

    plane: cp.ControlPlane
    pool: chaos.Pool
    scheduler: chaos.Scheduler
    scheduler_name: str
    namespace: str
    rng: random.Random
    proxy: chaos.LatencyProxy | None = None
    outages: chaos.Outages = field(default_factory=chaos.Outages)
    created: int = 0

    def __post_init__(self) -> None:
        self.core: Any = client.CoreV1Api(self.plane.api_client())

    def pod(self, name: str, *, host: str | None = None, gpus: int = 0, milli: int = 0) -> dict[str, Any]:
        """A pod of this scenario's scheduler in its pool: the shape given, else a random one."""
        if not gpus and not milli:
            gpus, milli = chaos.random_shape(self.rng)
        return chaos.gpu_pod(name, self.scheduler_name, self.pool.label, host=host, gpus=gpus, milli=milli)

    def burst(self, count: int, prefix: str) -> list[dict[str, Any]]:
        bodies = [self.pod(f"{prefix}-{i}") for i in range(count)]
        self.create(bodies)
        return bodies

    def create(self, bodies: list[dict[str, Any]]) -> None:
        chaos.create_pods(self.core, self.namespace, bodies)
        self.created += len(bodies)

    def bound(self) -> int:
        return len(scheduling.bound(scheduling.api_json(self.core.list_namespaced_pod, self.namespace)["items"]))

    def wait_bound(self, count: int, timeout: float = 60) -> None:
        wait_for(lambda: self.bound() >= count, f"{count} pods of {self.namespace} to be bound", timeout=timeout)

    def observe(self) -> chaos.Verdict:
        """One look at the API (and the scheduler's health and metrics): every invariant of the module."""
        state = chaos.snapshot(self.core, [self.namespace])
        capacity = (scheduling.capacity_problems(state.pods, state.nodes, scheduler=self.scheduler_name)
                    + scheduling.overcommit_problems(self.core))  # the whole cluster too; the same finding once
        broken = list(dict.fromkeys(capacity)) + chaos.outage_problems(state, self.outages) + chaos.event_problems(state)
        unsettled = chaos.pending_problems(state, self.scheduler_name)
        status, body = self.scheduler.health()
        if status != 200:
            unsettled.append(f"{self.scheduler.mode}: health {status} {body[:200]}")
        notes = []
        model = chaos.model_problems(state, self.scheduler.metrics(), self.pool.names)
        if model is None:
            notes.append(f"{self.scheduler.mode} exports no gpu_scheduler_allocated_gpus: its model was not compared")
        else:
            unsettled += model
        return chaos.Verdict(broken, unsettled, notes)

    def verify(self, timeout: float = SETTLE_SECONDS) -> None:
        """Wait for the API to settle, then fail with every problem found (the first 40)."""
        verdict = chaos.settle(self.observe, timeout=timeout)
        for note in verdict.notes:
            print(f"note: {note}")
        problems = verdict.problems()
        assert not problems, (f"{self.scheduler.mode}, {self.created} pods in {self.namespace}: "
                              f"{len(problems)} problem(s):\n  " + "\n  ".join(problems[:40]))


@pytest.fixture()
def open_scenario(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Scenario]]:
    """`open_scenario(plane, pool, mode, latency=None)`: a fresh namespace and scheduler (through a
    LatencyProxy when `latency` is given); everything is stopped and the pods deleted afterwards."""
    opened: list[tuple[Scenario, Callable[[], tuple[str, str]]]] = []

    def open_(plane: cp.ControlPlane, pool: chaos.Pool, mode: str, *, latency: float | None = None) -> Scenario:
        core: Any = client.CoreV1Api(plane.api_client())
        tag = uuid.uuid4().hex[:5]
        name = f"chaos-{mode}-{tag}"
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        config_file = tmp_path / "config.yaml"
        config_file.write_text(f"schedulerName: {name}\n")
        proxy = None
        kubeconfig = plane.kubeconfig
        if latency is not None:
            proxy = chaos.LatencyProxy(plane.server, latency=latency).start()
            kubeconfig = proxy.kubeconfig(plane.kubeconfig, tmp_path / "proxied.kubeconfig")
        scheduler: chaos.Scheduler
        if mode == "run":
            scheduler = chaos.RunScheduler(kubeconfig, config_file, tmp_path, name="run")
        else:
            scheduler = chaos.ExtenderScheduler(plane, kubeconfig, config_file, tmp_path, profile=name,
                                                min_nodes=len(pool.gpus))
        rng = random.Random(f"{SEED}-{request.node.name}")  # each scenario its own, the same every run
        scenario = Scenario(plane, pool, scheduler, name, name, rng, proxy)

        def logs() -> tuple[str, str]:
            return f"{mode} ({name})", scheduler.logs()

        conftest.LOG_SOURCES.append(logs)
        opened.append((scenario, logs))
        scheduler.start()
        return scenario

    yield open_
    for scenario, logs in opened:
        conftest.LOG_SOURCES.remove(logs)
        scenario.scheduler.stop()
        if scenario.proxy is not None:
            scenario.proxy.stop()
        scenario.core.delete_collection_namespaced_pod(scenario.namespace, grace_period_seconds=0)
        for name in scenario.pool.names:  # a failed scenario may have left a node out or cordoned
            try:
                scenario.core.patch_node(name, {"spec": {"unschedulable": False}})
            except client.exceptions.ApiException as err:
                if err.status != 404:
                    raise
                scenario.pool.register(scenario.plane.api_client(), name)


def unschedulable(scenario: Scenario) -> list[dict[str, Any]]:
    """A pod no node of the pool can hold (16 GPUs on 8): it must stay pending, with its reason."""
    return [scenario.pod("too-big", gpus=16)]


@pytest.mark.parametrize("mode", MODES)
def test_apiserver_killed_mid_burst_and_restarted(plane, pool, open_scenario, mode):
    """SIGKILL, same port, twice, while bindings are in flight: the scheduler's traffic is held 0.2 s each
    way, so some bindings are stored by the apiserver whose answers never arrive."""
    scenario = open_scenario(plane, pool, mode, latency=0.2)
    scenario.create(unschedulable(scenario))
    for round_, (burst, bound) in enumerate(((50, 10), (40, 60))):
        scenario.burst(burst, f"round-{round_}")
        scenario.wait_bound(bound)
        plane.kill_apiserver()
        plane.restart_apiserver()
    scenario.burst(10, "after")
    scenario.verify()


@pytest.mark.parametrize("mode", MODES)
def test_watches_expired_by_etcd_compaction_relist_and_miss_nothing(uncached_plane, uncached_pool, open_scenario,
                                                                    mode):
    """Compaction alone does not touch a watch that is open and caught up (etcd keeps it going), so the
    proxy also cuts every connection: each watch then starts again from a resourceVersion the compactor
    has just removed, and gets ERROR 410 Expired in its stream (no watch cache), until the storm ends."""
    scenario = open_scenario(uncached_plane, uncached_pool, mode, latency=0.1)
    core = scenario.core
    scenario.create(unschedulable(scenario))
    scenario.burst(50, "before")
    scenario.wait_bound(10)

    storming = threading.Event()
    storming.set()
    compactions = []

    def storm() -> None:
        """Two writes past every watch's version, then a compaction, again and again."""
        deadline = time.monotonic() + 60
        while storming.is_set() and time.monotonic() < deadline:
            for value in ("a", "b"):
                core.patch_namespace(scenario.namespace, {"metadata": {"annotations": {"chaos/written": value}}})
            compactions.append(uncached_plane.compact_etcd())

    def expired() -> float:
        return chaos.metric_sum(scenario.scheduler.metrics(), "gpu_scheduler_watch_failures_total", reason="expired")

    compactor = threading.Thread(target=storm, name="compactor", daemon=True)
    compactor.start()
    try:
        for round_ in range(3):
            assert scenario.proxy is not None
            scenario.proxy.sever()
            scenario.burst(10, f"storm-{round_}")
        wait_for(lambda: expired() >= 2, f"the {mode} scheduler's watches to get 410 Expired", timeout=30)
    finally:
        storming.clear()
        compactor.join(30)
    assert compactions, "the compactor never ran"
    scenario.burst(10, "after")
    scenario.verify()


@pytest.mark.parametrize("mode", MODES)
def test_nodes_deleted_cordoned_and_reregistered_while_pinned_pods_arrive(plane, pool, open_scenario, mode):
    """A node taken away (deleted, or cordoned) while pods are bound to it and more pods pinned to it
    (kubernetes.io/hostname) arrive; once the scheduler has said a pinned pod cannot go there, the node
    comes back under its name, with its pods, and gets enough pinned pods to fill it again."""
    scenario = open_scenario(plane, pool, mode)
    core, api = scenario.core, plane.api_client()
    victims = scenario.rng.sample(pool.names, 4)
    scenario.create(unschedulable(scenario))
    scenario.create([scenario.pod(f"early-{victim}-{i}", host=victim) for victim in victims for i in range(3)])
    scenario.burst(40, "early")
    scenario.wait_bound(20)

    for round_, victim in enumerate(victims):
        deleted = round_ % 2 == 0
        scenario.outages.took_away(victim)
        if deleted:
            core.delete_node(victim)
        else:
            core.patch_node(victim, {"spec": {"unschedulable": True}})
        waiting = f"away-{victim}"
        scenario.create([scenario.pod(waiting, host=victim, gpus=1)])
        scenario.burst(5, f"during-{round_}")
        wait_for(lambda: _refused(core, scenario.namespace, waiting),
                 f"the {mode} scheduler to refuse {waiting} while {victim} is away", timeout=30)
        if deleted:
            pool.register(api, victim)
        else:
            core.patch_node(victim, {"spec": {"unschedulable": False}})
        scenario.outages.gave_back(victim)
        refill = [scenario.pod(f"back-{victim}-{i}", host=victim, gpus=1) for i in range(pool.gpus[victim])]
        scenario.create(refill + [scenario.pod(f"back-{victim}-share-{i}", host=victim, milli=500) for i in range(2)])
    scenario.verify()


def _refused(core: Any, namespace: str, name: str) -> bool:
    pod = scheduling.api_json(core.read_namespaced_pod, name, namespace)
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in pod["status"].get("conditions") or [])


@pytest.mark.parametrize("mode", MODES)
def test_pods_recreated_under_their_names_while_bindings_are_in_flight(plane, pool, open_scenario, mode):
    """The scheduler's API traffic goes through a proxy that holds every chunk 0.25 s each way, so bindings
    stay in flight; meanwhile pods that are not bound yet are deleted and created again under the same
    name, with the other kind of request (whole GPU <-> share)."""
    scenario = open_scenario(plane, pool, mode, latency=0.25)
    core = scenario.core
    scenario.create(unschedulable(scenario))
    bodies = scenario.burst(60, "pod")
    scenario.wait_bound(3)
    for round_ in range(2):
        pending = [p["metadata"]["name"] for p in scheduling.api_json(core.list_namespaced_pod, scenario.namespace)["items"]
                   if not p["spec"].get("nodeName") and p["metadata"]["name"].startswith("pod-")]
        for name in scenario.rng.sample(pending, min(15, len(pending))):
            old = next(b for b in bodies if b["metadata"]["name"] == name)
            core.delete_namespaced_pod(name, scenario.namespace, grace_period_seconds=0)
            renewed = scenario.pod(name, milli=500) if scheduling.whole_gpus(old) else scenario.pod(name, gpus=1)
            _create_again(core, scenario.namespace, renewed)
            bodies = [renewed if b["metadata"]["name"] == name else b for b in bodies]
        scenario.wait_bound(3 + 12 * (round_ + 1), timeout=90)
    scenario.verify(timeout=90)


def _create_again(core: Any, namespace: str, body: dict[str, Any]) -> None:
    """Create a pod whose namesake was just deleted (grace 0: gone at once, but retry a 409 briefly)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            core.create_namespaced_pod(namespace, body)
            return
        except client.exceptions.ApiException as err:
            if err.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("mode", MODES)
def test_scheduler_killed_mid_burst_and_restarted(plane, pool, open_scenario, mode):
    """SIGKILL (the extender's gunicorn master and worker together; kube-scheduler keeps running) while
    bindings are in flight; pods keep arriving while it is down; the new process rebuilds from the API."""
    scenario = open_scenario(plane, pool, mode)
    scenario.create(unschedulable(scenario))
    scenario.burst(60, "before")
    scenario.wait_bound(15)
    scenario.scheduler.kill()
    scenario.burst(20, "while-down")
    scenario.scheduler.restart()
    scenario.burst(10, "after")
    scenario.verify()
