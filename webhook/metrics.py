"""Prometheus metrics of the webhook.

Under gunicorn each worker is a process, so exposition uses prometheus_client's
multiprocess mode whenever PROMETHEUS_MULTIPROC_DIR is set (the `webhook` command sets
it before any worker starts); otherwise the default registry.
"""

from __future__ import annotations

import os
import struct
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client import REGISTRY, CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

OUTCOMES = ("patched", "unchanged", "ignored", "invalid", "error", "no_config")
REQUESTS = Counter(
    "gpu_scheduler_webhook_requests_total",
    "Admission requests answered, by outcome (patched, unchanged, ignored, invalid, error, no_config).",
    ["outcome"],
)
LATENCY = Histogram(
    "gpu_scheduler_webhook_request_duration_seconds",
    "Time to answer one admission request, from body read to response built.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
RULE_MATCHES = Counter(
    "gpu_scheduler_webhook_rule_matches_total",
    "GPU pods that matched each rule.",
    ["rule"],
)
NAMESPACE_LOOKUP_FAILURES = Counter(
    "gpu_scheduler_webhook_namespace_lookup_failures_total",
    "Pods whose namespace labels could not be read, so namespace-selecting rules could not match.",
)
CLAIM_LOOKUP_FAILURES = Counter(
    "gpu_scheduler_webhook_claim_lookup_failures_total",
    "ResourceClaims and ResourceClaimTemplates named by pods that could not be read (reason not_found or error), "
    "so those pods' DRA demand was unknown to rules with deviceClasses.",
    ["reason"],
)
CONFIG_RELOADS = Counter(
    "gpu_scheduler_config_reloads_total",
    "Valid configurations loaded (the first load included).",
)
CONFIG_RELOAD_FAILURES = Counter(
    "gpu_scheduler_config_reload_failures_total",
    "Configurations rejected as invalid; the last good one stayed in force.",
)
SERVING_CERTIFICATE_EXPIRY = Gauge(
    "gpu_scheduler_serving_certificate_expiry_timestamp_seconds",
    "Unix time at which the serving certificate in use expires (webhook, and the extender when it serves TLS).",
    multiprocess_mode="livemostrecent",
)
CONFIG_LAST_SUCCESS = Gauge(
    "gpu_scheduler_config_last_success_timestamp_seconds",
    "Unix time of the last valid configuration load.",
    multiprocess_mode="max",
)


# Series that exist from the start, at 0, so rates and alerts over them have data before the first request.
for _outcome in OUTCOMES:
    REQUESTS.labels(_outcome)


def exposition() -> bytes:
    """All metrics in the text format, summed over gunicorn workers when there are several.

    A worker that is just starting creates its metrics file before it writes the file's header;
    read in between, the empty file fails to parse, so the read is tried again a moment later.
    """
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return generate_latest(REGISTRY)
    attempts = 5
    for attempt in range(1, attempts + 1):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        try:
            return generate_latest(registry)
        except struct.error:
            if attempt == attempts:
                raise
            time.sleep(0.01 * attempt)
    raise AssertionError("unreachable")
