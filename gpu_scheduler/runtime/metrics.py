"""Prometheus metrics of the standalone scheduler (one process: the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from urllib3.exceptions import HTTPError

ATTEMPTS = Counter(
    "gpu_scheduler_schedule_attempts_total",
    "Scheduling attempts by result (scheduled, unschedulable, error).",
    ["result"],
)
LATENCY = Histogram(
    "gpu_scheduler_scheduling_duration_seconds",
    "From a pod entering the queue to its binding being accepted.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BIND_ERROR_REASONS = {400: "invalid", 401: "forbidden", 403: "forbidden", 404: "not_found", 409: "conflict",
                      422: "invalid"}
BIND_ERRORS = Counter("gpu_scheduler_bind_errors_total",
                      "Bindings (and the writes before them) the API refused or that failed, by reason: conflict "
                      "(409), not_found (404), forbidden (401, 403), invalid (400, 422), server_error (5xx), "
                      "unreachable (no answer), other.", ["reason"])
PENDING = Gauge("gpu_scheduler_pending_pods", "Pods waiting in the scheduling queue, by state (active, unschedulable, "
                "gated: kept out by a PreEnqueue, such as a scheduling gate).", ["state"])
OLDEST_PENDING = Gauge("gpu_scheduler_oldest_pending_pod_seconds",
                       "How long the pod waiting longest to be scheduled has waited (0 when none waits); pods kept "
                       "out by a scheduling gate are not counted.")
LEADER = Gauge("gpu_scheduler_leader", "1 while this instance holds the leader lease (or runs without election).")
PROMOTIONS = Counter(
    "gpu_scheduler_deletion_cost_promotions_total",
    "Deletion-cost warm-up patches by result (promoted, skipped: the cost had changed, error).",
    ["result"],
)
GANG_ATTEMPTS = Counter(
    "gpu_scheduler_gang_attempts_total",
    "Pod-group decisions by result (scheduled: its members placed at once; unschedulable: none placed).",
    ["result"],
)
PREEMPTION_ATTEMPTS = Counter(
    "gpu_scheduler_preemption_attempts_total",
    "Preemption attempts: pods that fit nowhere and were looked at for victims (as kube-scheduler's "
    "scheduler_preemption_attempts_total).",
)
PREEMPTION_VICTIMS = Histogram(
    "gpu_scheduler_preemption_victims",
    "Victims selected per preemption (as kube-scheduler's scheduler_preemption_victims).",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)


def bind_error_reason(error: Exception) -> str:
    """The reason label of a failed binding: a few classes, so the series stay few and exist from the start."""
    status = getattr(error, "status", None)
    if not isinstance(status, int) or not status:
        return "unreachable" if isinstance(error, (HTTPError, OSError)) else "other"
    return "server_error" if status >= 500 else BIND_ERROR_REASONS.get(status, "other")


# Series that exist from the start, at 0, so rates and alerts over them have data before the first event.
for _reason in (*sorted(set(BIND_ERROR_REASONS.values())), "server_error", "unreachable", "other"):
    BIND_ERRORS.labels(_reason)
for _result in ("scheduled", "unschedulable", "error"):
    ATTEMPTS.labels(_result)
for _result in ("promoted", "skipped", "error"):
    PROMOTIONS.labels(_result)
for _result in ("scheduled", "unschedulable"):
    GANG_ATTEMPTS.labels(_result)
