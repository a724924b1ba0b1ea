"""Volumes at bind time, as kube-scheduler's VolumeBinding Reserve, PreBind and Unreserve have them.

The decision (scheduler_core.volumes, run by the core's filters) chose a volume for each unbound claim, or to
provision it on the node: Reserve overlays that plan on the watched storage objects so the next decisions see the
volumes taken; PreBind writes it (each chosen volume's claimRef, each claim's selected node) and then waits, without
holding a thread, until every claim is bound, for at most VolumeBinding's 600 s; Unreserve drops the overlay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gpu_scheduler import watching
from gpu_scheduler.runtime import binding
from gpu_scheduler.runtime.framework import BindingCycle, Handle, Plugin, Wait
from scheduler_core import volumes

BIND_TIMEOUT = 600.0  # seconds a pod waits for its claims to bind before it is scheduled again (upstream's)


class VolumeBinding(Plugin):
    name = "VolumeBinding"

    def __init__(self, handle: Handle, *, bind_timeout: float = BIND_TIMEOUT):
        super().__init__(handle)
        self.bind_timeout = bind_timeout

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """Claims, volumes, classes and the CSI objects the volume filters read, into the model."""
        return watching.storage_watches(
            client.CoreV1Api(self.handle.api), client.StorageV1Api(self.handle.api),
            lambda kind, items: put(("storages", kind, items)), lambda kind, event, obj: put(("storage", kind, event, obj)))

    def reserve(self, cycle: BindingCycle) -> None:
        plan = cycle.decision.volume_plan
        if plan:
            storage = self.handle.model.cluster.storage
            cycle.state[self.name] = volumes.writes(storage, plan)  # read on the loop thread, which owns the model
            storage.assume(plan)

    def unreserve(self, cycle: BindingCycle) -> None:
        if cycle.decision.volume_plan:
            self.handle.model.cluster.storage.forget(cycle.decision.volume_plan)

    def pre_bind(self, cycle: BindingCycle) -> Wait | None:
        plan = cycle.decision.volume_plan
        if not plan:
            return None
        written = binding.write_volumes(self.handle.api, cycle.state[self.name])
        return Wait(lambda: self._settled(plan, written), time.monotonic() + self.bind_timeout,
                    self._failure(f"timed out after {self.bind_timeout:.0f} s waiting for the claims to bind"))

    def _settled(self, plan: volumes.Plan, written: dict[str, str]) -> bool | str:
        """On the loop thread: every claim bound (True), not yet (False), or why it never will be here."""
        model = self.handle.model.cluster
        row = model.index.get(plan.node)
        state = (volumes.settled(model.storage, plan, written, model.node(row).labels) if row is not None
                 else f'node "{plan.node}" is gone')
        if state is False:
            return False
        model.storage.forget(plan)  # the watched objects stand for the plan now, or it failed
        return True if state is True else self._failure(str(state))

    def _failure(self, reason: str) -> str:
        return f'running PreBind plugin "{self.name}": binding volumes: {reason}'
