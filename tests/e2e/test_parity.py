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

from tests.e2e import parity
from tests.e2e.scheduling import start_scheduler

SEEDS = (1,)  # one here (35 s); benchmarks/parity.py runs the long differential: 20 seeds, 0 of 711 refused
SUFFIX = uuid.uuid4().hex[:5]
OURS = f"parity-ours-{SUFFIX}"
KUBE = f"parity-kube-{SUFFIX}"


class Schedulers:
    """kube-scheduler as KUBE with the pinning extender, for the whole module; `gpu-scheduler run` as OURS, with
    the shipped RBAC, started per seed and stopped before kube-scheduler is asked: else it would fill the room
    a replaced pod leaves with a pod it had left pending, before the pinned copy gets there."""

    def __init__(self, kubeconfig: Path, work: Path):
        self.kubeconfig, self.work = kubeconfig, work
        self.config = work / "config.yaml"
        self.config.write_text(f"schedulerName: {OURS}\n")
        self.ours: Any = None

    def start_ours(self) -> Any:
        self.ours = start_scheduler(self.kubeconfig, self.work, "--config", str(self.config), name="parity-run")
        return self.ours

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
    outcome = parity.compare(api, seed, prefix=f"parity-{SUFFIX}", ours=OURS, kube=KUBE,
                             start_ours=schedulers.start_ours, stop_ours=schedulers.stop_ours)
    print(outcome.summary())
    assert outcome.overcommitted == [], f"ours overcommitted: {outcome.overcommitted}"
    assert outcome.refused == [], "bindings kube-scheduler refuses:\n  " + "\n  ".join(outcome.refused)
    assert outcome.missed == [], "left pending by ours, yet kube-scheduler places them in the same state:\n  " + \
        "\n  ".join(outcome.missed)
