"""Scheduling gates, as kube-scheduler's SchedulingGates plugin honours them (plugins/schedulinggates, v1.36).

A pod created with `spec.schedulingGates` (Kueue and other admission controllers hold pods this way) is not tried
while any gate is left: never attempted, assumed or reported unschedulable (the apiserver itself set its
PodScheduled=False condition, reason SchedulingGated). Gates can only be removed, never added; the update that
removes the last one brings the pod back at once.
"""

from __future__ import annotations

from gpu_scheduler.runtime.framework import Plugin
from scheduler_core import pods, watched


class SchedulingGates(Plugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        return pods.gated_reason(pending.facts)
