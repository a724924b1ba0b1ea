"""The capabilities of `gpu-scheduler run`, one module each, at the extension points of
gpu_scheduler.runtime.framework. `ALL` is the order the runner calls them in at every point; a new capability is a
new module here and one entry in `ALL` (the table in ARCHITECTURE.md says which points each one uses).
"""

from __future__ import annotations

from gpu_scheduler.runtime.plugins import dra, gangs, gates, preemption, utilization, volumes, warmup

ALL = (
    gates.SchedulingGates,  # PreEnqueue
    preemption.DefaultPreemption,  # PreEnqueue, PostFilter
    gangs.Gangs,  # PodGroup, PostFilter for a gang, Permit, Unreserve, tick (the gang's deadline)
    volumes.VolumeBinding,  # Reserve, PreBind (write, then wait for the claims), Unreserve
    dra.DynamicResources,  # Reserve, PreBind (allocate and reserve the claims; wait for binding conditions), Unreserve
    warmup.WarmUp,  # tick (deletion-cost warm-up)
    utilization.LiveUtilization,  # its own thread: live GPU utilization from Prometheus into the model
)

# `gpu-scheduler extender`: kube-scheduler runs its own gates, preemption (asking /preempt), volumes and gangs; the
# extender binds through the same binding cycle and hosts what no kube-scheduler plugin does.
EXTENDER = (
    warmup.WarmUp,  # tick, on the replica holding the extender's Lease
    utilization.LiveUtilization,  # its own thread, on every replica
)
