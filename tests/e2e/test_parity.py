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
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import start_scheduler

SEEDS = (1, 2, 3)
SUFFIX = uuid.uuid4().hex[:5]
OURS = f"parity-ours-{SUFFIX}"
KUBE = f"parity-kube-{SUFFIX}"
UNSUPPORTED = "gpu-scheduler cannot evaluate"


@pytest.fixture(scope="module")
def schedulers(plane: Any, scheduler_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`gpu-scheduler run` as OURS, with the shipped RBAC; kube-scheduler as KUBE with the pinning extender."""
    from tests.e2e.conftest import LOG_SOURCES

    work = tmp_path_factory.mktemp("parity")
    config = work / "config.yaml"
    config.write_text(f"schedulerName: {OURS}\n")
    ours = start_scheduler(scheduler_kubeconfig, work, "--config", str(config), name="parity-run")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run (parity)", ours.logs()[-6000:]))
    pinning = parity.PinningExtender().start()
    kube = plane.start_scheduler(pinning.config(KUBE))
    yield
    kube.stop()
    pinning.stop()
    ours.stop()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_binding_of_ours_is_one_kube_scheduler_accepts(api, schedulers, seed):
    core: Any = client.CoreV1Api(api)
    scenario = parity.Scenario.generate(seed)
    runs = {}
    for way, scheduler in (("ours", OURS), ("kube", KUBE)):
        pool = f"parity-{SUFFIX}-{seed}-{way}"
        namespace = pool
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        scenario.create_nodes(api, pool)
        for body in scenario.bodies(scheduler, pool):
            core.create_namespaced_pod(namespace, body)
        runs[way] = (namespace, wait_for(lambda ns=namespace: parity.settled(core, ns),
                                         f"{way}: every pod bound or refused with a reason", timeout=90))
    namespace, ours = runs["ours"]
    bodies = {body["metadata"]["name"]: body for body in scenario.bodies(KUBE, f"parity-{SUFFIX}-{seed}-ours")}

    refused = []
    bound = {name: pod["spec"]["nodeName"] for name, pod in ours.items() if pod["spec"].get("nodeName")}
    for name, node in sorted(bound.items()):
        placed, message = parity.ask_kube_scheduler(core, namespace, ours[name], bodies[name], KUBE, pin=node)
        if placed != node:
            refused.append(f"{name} on {node}: kube-scheduler says {message}")

    pending = sorted(name for name in ours if name not in bound)
    placeable = []
    for name in pending:  # offered to kube-scheduler in ours' final state (this binds those it places)
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
