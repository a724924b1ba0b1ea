"""Differential test against the real kube-scheduler: `gpu-scheduler run` never binds a pod where kube-scheduler
would not (see tests/e2e/parity.py for how kube-scheduler is asked).

For each seed, on its own pool of 12 nodes in 3 zones (one tainted), about 40 GPU pods in groups with required
pod anti-affinity, pod affinity to another group's zone, a zone spread constraint and host ports are scheduled
once by `gpu-scheduler run` and once by kube-scheduler from the same start. Then every binding of ours is put
to kube-scheduler, and every pod ours left pending is offered to kube-scheduler in ours' final state: a pod
kube-scheduler places there must be one ours refuses on purpose (a constraint it does not evaluate yet).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import parity
from tests.e2e import scheduling
from tests.e2e.scheduling import start_scheduler

SEEDS = (1, 2, 3)
SUFFIX = uuid.uuid4().hex[:5]
OURS = f"parity-ours-{SUFFIX}"
KUBE = f"parity-kube-{SUFFIX}"
UNSUPPORTED = "gpu-scheduler cannot evaluate"


class Schedulers:
    """kube-scheduler as KUBE with the pinning extender, for the whole module; `gpu-scheduler run` as OURS, with
    the shipped RBAC, started per seed and stopped before kube-scheduler is asked: else it would fill the room
    a replaced pod leaves with a pod it had left pending, before the pinned copy gets there."""

    def __init__(self, kubeconfig: Path, work: Path):
        self.kubeconfig, self.work = kubeconfig, work
        self.config = work / "config.yaml"
        self.config.write_text(f"schedulerName: {OURS}\n")
        self.ours: Any = None

    def start_ours(self) -> None:
        self.ours = start_scheduler(self.kubeconfig, self.work, "--config", str(self.config), name="parity-run")

    def stop_ours(self) -> None:
        if self.ours is not None:
            self.ours.stop()
            self.ours = None

    def logs(self) -> tuple[str, str]:
        return "gpu-scheduler run (parity)", (self.ours.logs()[-6000:] if self.ours is not None else "(stopped)")


@pytest.fixture(scope="module")
def schedulers(plane: Any, scheduler_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.e2e.conftest import LOG_SOURCES

    found = Schedulers(scheduler_kubeconfig, tmp_path_factory.mktemp("parity"))
    LOG_SOURCES.append(found.logs)
    pinning = parity.PinningExtender().start()
    kube = plane.start_scheduler(pinning.config(KUBE))
    yield found
    found.stop_ours()
    kube.stop()
    pinning.stop()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_binding_of_ours_is_one_kube_scheduler_accepts(api, schedulers, seed):
    core: Any = client.CoreV1Api(api)
    scenario = parity.Scenario.generate(seed)
    schedulers.start_ours()
    for way, scheduler in (("ours", OURS), ("kube", KUBE)):  # both at once, each on its own pool
        pool = f"parity-{SUFFIX}-{seed}-{way}"
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": pool}})
        scenario.create_nodes(api, pool)
        for body in scenario.bodies(scheduler, pool):
            core.create_namespaced_pod(pool, body)
    runs = {way: (f"parity-{SUFFIX}-{seed}-{way}", parity.settled(core, f"parity-{SUFFIX}-{seed}-{way}"))
            for way in ("ours", "kube")}
    schedulers.stop_ours()
    namespace, ours = runs["ours"]
    bodies = {body["metadata"]["name"]: body for body in scenario.bodies(KUBE, f"parity-{SUFFIX}-{seed}-ours")}

    refused = []
    bound = {name: pod["spec"]["nodeName"] for name, pod in ours.items() if pod["spec"].get("nodeName")}
    problems = scheduling.overcommit_problems(core)
    assert problems == [], f"ours overcommitted: {problems}"
    for name, node in sorted(bound.items()):
        placed, message = parity.ask_kube_scheduler(core, namespace, ours[name], bodies[name], KUBE, pin=node)
        if placed != node:
            refused.append(f"{name} on {node}: kube-scheduler says {message}; {parity.gpus_on(core, node)}")

    pending = sorted(name for name in ours if name not in bound)
    placeable = []
    for name in pending:  # offered to kube-scheduler in ours' final state, then taken away again
        placed, _ = parity.ask_kube_scheduler(core, namespace, ours[name], bodies[name], KUBE, pin=None)
        if placed is not None:
            placeable.append((name, parity.refusal(ours[name]) or ""))
    kube_pending = sum(1 for pod in runs["kube"][1].values() if not pod["spec"].get("nodeName"))
    unsupported = [name for name, reason in placeable if UNSUPPORTED in reason]
    print(f"seed {seed}: {len(scenario.pods)} pods; ours bound {len(bound)}, left {len(pending)} pending "
          f"({len(unsupported)} with constraints it does not evaluate yet, {len(placeable)} that kube-scheduler "
          f"then placed); kube-scheduler alone left {kube_pending} pending; {len(refused)} of ours refused by it")
    assert refused == [], "bindings kube-scheduler refuses:\n  " + "\n  ".join(refused)
    missed = [f"{name}: {reason}" for name, reason in placeable if UNSUPPORTED not in reason]
    assert missed == [], "left pending by ours, yet kube-scheduler places them in the same state:\n  " + \
        "\n  ".join(missed)
