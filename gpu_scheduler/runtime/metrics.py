"""Prometheus metrics of the standalone scheduler (one process: the default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
BIND_ERRORS = Counter("gpu_scheduler_bind_errors_total", "Bindings the API refused or that failed.", ["reason"])
PENDING = Gauge("gpu_scheduler_pending_pods", "Pods waiting in the scheduling queue, by state (active, unschedulable, "
                "gated: kept out by a PreEnqueue, such as a scheduling gate).", ["state"])
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
