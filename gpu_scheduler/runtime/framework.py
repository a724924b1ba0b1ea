"""The runtime's extension points, as kube-scheduler's framework names them (pkg/scheduler/framework/interface.go,
the points called by schedule_one.go, v1.36).

A capability of `gpu-scheduler run` (gangs, preemption, volumes, warm-up, scheduling gates, next: DRA claims) is one
module under `gpu_scheduler/runtime/plugins/` with one `Plugin` subclass that overrides the points it needs. The
runner (`running.LiveScheduler`) calls every plugin at each point, in the order of `plugins.ALL`, and knows none of
them by name. The points, in the order a pod meets them:

  PreEnqueue   may the pod be tried at all (scheduling gates; a preemption still under way)   loop thread
  PodGroup     decide the pod with others, at once (gangs; upstream's schedule_one_podgroup)  loop thread
  (PreFilter, Filter, Score: the pure core, scheduler_core.framework and .preemption.decide)
  PostFilter   the pod fits nowhere: make room (preemption)                                    loop thread
  Reserve      account the decision in the model at once                                       loop thread
  Permit       may the binding go ahead (a gang whose other member failed may not)              binder thread
  PreBind      writes the binding needs first, and what it must wait for (volumes)              binder thread
  Bind         the Binding, with the devices annotation (the runner's one binder)               binder thread
  PostBind     the pod is bound                                                                  loop thread
  Unreserve    any step after Reserve failed: undo what Reserve did                              loop thread

Besides the points, a plugin may keep state per pod (`pod_settled` drops it), act once a second (`tick`: warm-up,
deadlines), see configuration changes (`configure`) and report on a source of its own (`health`). Everything a plugin may use of the runner is the `Handle`
(`SchedulerHandle` for what only `run` lends). The extender binds through the same Reserve and binding cycle
(`reserve`, `bind`, `unreserve` below) and hosts the plugins that serve in its mode (plugins.EXTENDER).
A plugin never imports another (an import-linter contract keeps them independent): what two need, the runner or a
shared runtime module provides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpu_scheduler import watching
from gpu_scheduler.runtime import binding, writes
from scheduler_core import framework as core
from scheduler_core import preemption, queueing, watched
from webhook import config

REPORT_INTERVAL = 60.0  # seconds between repeated reports of the same unschedulable reason, to a pod or a group


@dataclasses.dataclass
class BindingCycle:
    """One pod's way from Reserve to Bind (upstream's binding cycle). `state` holds what a plugin's Reserve or
    PreBind must hand to its later points, under the plugin's name (upstream's CycleState)."""

    pending: watched.PendingPod
    decision: core.Decision
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    prebound: int = 0  # how many plugins' PreBind have finished

    @property
    def uid(self) -> str:
        return self.pending.uid

    @property
    def node(self) -> str:
        return self.decision.node or ""


@dataclasses.dataclass
class Wait:
    """A PreBind that has written what it must and now waits for the cluster (claims to bind, next: a device
    driver's binding conditions). The runner evaluates `check` on the loop thread, after model events and once a
    second: False, still waiting; True, go on to the next PreBind; a string, the binding fails with that message.
    Past `deadline` (time.monotonic()) it fails with `timeout`."""

    check: Callable[[], bool | str]
    deadline: float
    timeout: str


class Rejected(Exception):
    """A Permit that refuses the binding: the pod goes back to pending through Unreserve, without an API call."""


class Handle(Protocol):
    """What every mode lends its plugins (upstream's framework.Handle): `run`'s runner and the extender alike."""

    api: Any  # the kubernetes ApiClient
    model: watched.WatchedCluster
    settings: config.Config
    identity: str  # this process, in the events it writes

    def post(self, call: Callable[..., None], *args: Any) -> None:
        """Run `call(*args)` where the model may be touched (the loop thread of `run`; under the extender's lock)."""

    def submit_report(self, call: Callable[..., Any], *args: Any) -> None:
        """Run an API write on the small reporter pool (never in the way of bindings)."""


class SchedulerHandle(Handle, Protocol):
    """What `gpu-scheduler run`'s runner lends besides: it decides and binds, the extender answers kube-scheduler."""

    framework: core.Framework
    preemptor: preemption.Evaluator
    queue: queueing.SchedulingQueue

    def reserve_and_bind(self, pending: watched.PendingPod, decision: core.Decision,
                         state: dict[str, Any] | None = None) -> None:
        """Reserve the decision and start its binding cycle."""

    def report_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                             event: bool = True) -> None:
        """PodScheduled=False (and a FailedScheduling event), not repeated within a while for the same message."""

    def remember_report(self, uid: str, message: str) -> None:
        """Count `message` as told to the pod now (a plugin that wrote it itself)."""

    def write_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                            event: bool = True) -> None:
        """The same written now, on the calling (plugin) thread; raises the API's errors."""

    def record_event(self, pending: watched.PendingPod, kind: str, reason: str, message: str) -> None:
        """An event on the pod, on the calling thread."""

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        """Why some plugin's PreEnqueue keeps the pod from being tried now, or None."""


# --- the binding cycle, once for both modes ------------------------------------------------------


def reserve(model: watched.WatchedCluster, plugins: Sequence[Plugin], cycle: BindingCycle) -> None:
    """Reserve: the decision accounted in the model (which refuses an overcommit), then each plugin's Reserve."""
    model.assume(cycle.pending.facts, cycle.node, cycle.decision.devices, now=writes.now())
    for plugin in plugins:
        plugin.reserve(cycle)


def unreserve(plugins: Sequence[Plugin], cycle: BindingCycle) -> None:
    """Every plugin's Unreserve, in reverse order; the model's side is the caller's (it knows what the API says)."""
    for plugin in reversed(plugins):
        plugin.unreserve(cycle)


def bind(api: Any, plugins: Sequence[Plugin], cycle: BindingCycle) -> Wait | None:
    """Permit (once), each PreBind from where the cycle stopped, then Bind: one Binding that carries the devices
    annotation (gpu_scheduler.runtime.binding), so no pod is ever bound without its devices and a restart restores
    them from the pod. Returns the Wait of a PreBind that must wait (call again once it is over); raises Rejected,
    or the API's errors."""
    if cycle.prebound == 0:
        for plugin in plugins:
            plugin.permit(cycle)
    while cycle.prebound < len(plugins):
        wait = plugins[cycle.prebound].pre_bind(cycle)
        cycle.prebound += 1
        if wait is not None:
            return wait
    pending = cycle.pending
    binding.bind(api, namespace=pending.namespace, name=pending.name, uid=pending.uid, node=cycle.node,
                 devices=cycle.decision.devices)
    return None


class Plugin:
    """A capability: overrides the extension points it needs; each default does nothing and lets the pod go on."""

    name = ""
    # a pod this plugin's PreEnqueue keeps out is also reported unschedulable with the reason (upstream's PreEnqueue
    # says nothing; a user waiting on a missing claim should be told)
    reports_waiting = False

    def __init__(self, handle: Handle):
        self.handle = handle

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """The watches the capability needs, not started; each puts the model's events (runner.MODEL_EVENTS) with
        `put`."""
        return []

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        """Why the pod may not be tried now (it then waits, not attempted, reported only if `reports_waiting`;
        an update of the pod or a cluster change asks again), or None."""
        return None

    def schedule_group(self, pending: watched.PendingPod, nominees: list[tuple[Any, str]]) -> bool:
        """Decide the pod together with others (and report it); True when this plugin did."""
        return False

    def post_filter(self, pending: watched.PendingPod, reason: str, nominees: list[tuple[Any, str]],
                    excluded: list[int]) -> bool:
        """The pod fits nowhere (`reason`): make room, and report; True when this plugin took the pod."""
        return False

    def reserve(self, cycle: BindingCycle) -> None:
        """Account the decision (loop thread)."""

    def unreserve(self, cycle: BindingCycle) -> None:
        """Undo `reserve`: the binding failed or was refused (loop thread)."""

    def permit(self, cycle: BindingCycle) -> None:
        """Raise Rejected to stop the binding (binder thread)."""

    def pre_bind(self, cycle: BindingCycle) -> Wait | None:
        """The writes the binding needs first (binder thread); a Wait for what must happen before it goes on."""
        return None

    def post_bind(self, cycle: BindingCycle) -> None:
        """The pod is bound (loop thread)."""

    def pod_settled(self, uid: str) -> None:
        """The pod is no longer pending (bound, gone, not ours): drop what is kept about it."""

    def tick(self, now: float) -> None:
        """Once a second on the loop thread (`now`: time.monotonic())."""

    def configure(self, settings: config.Config) -> None:
        """A new valid configuration is in force."""

    def health(self) -> str | None:
        """A line about the plugin's own source or thread for the health detail (`/healthz?verbose`), or None."""
        return None

    def stop(self) -> None:
        """The scheduler stops: end the plugin's own threads."""
