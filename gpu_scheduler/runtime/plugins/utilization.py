"""Live GPU utilization from Prometheus (`scheduling.utilization.prometheus`), in both modes: what the
gpu-utilization score and the choice of GPUs on a node read.

A thread of its own asks the configured query every refreshSeconds (gpu_scheduler.prometheus) and hands the readings
(scheduler_core.utilization) to the model through the handle's `post`, so no decision ever waits for Prometheus.
When queries fail, the last readings stay in force until they are maxAgeSeconds old; then they are dropped, and
nodes score neutral (or by their annotation, where they have one) until Prometheus answers again. Each change of
state is logged once, shown by gpu_scheduler_utilization_source_up and in the health detail.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from gpu_scheduler import prometheus
from gpu_scheduler.runtime.framework import Handle, Plugin
from scheduler_core import profile, utilization
from webhook import config

log = logging.getLogger(__name__)

UP = Gauge("gpu_scheduler_utilization_source_up",
           "1 when the last query of the live utilization source (Prometheus) succeeded; 0 when it failed or no "
           "source is configured.", multiprocess_mode="livemostrecent")
STALE_READINGS = Gauge("gpu_scheduler_utilization_stale",
              "1 while a live utilization source is configured but nodes score without it (no answer yet, or its "
              "readings are older than maxAgeSeconds), else 0.", multiprocess_mode="livemostrecent")
LAST_SUCCESS = Gauge("gpu_scheduler_utilization_last_success_timestamp_seconds",
                     "Unix time of the last successful query of the live utilization source.",
                     multiprocess_mode="livemostrecent")
NODES = Gauge("gpu_scheduler_utilization_nodes", "Nodes of the model with a live utilization reading.",
              multiprocess_mode="livemostrecent")
QUERIES = Counter("gpu_scheduler_utilization_queries_total",
                  "Queries of the live utilization source by result (ok, error).", ["result"])
DURATION = Histogram("gpu_scheduler_utilization_query_duration_seconds",
                     "One refresh of the live utilization: the query, reading its answer and the readings.",
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
IGNORED = Counter("gpu_scheduler_utilization_ignored_samples_total",
                  "Samples of the utilization query left out, by reason (invalid value: NaN, infinite or out of "
                  "range; no node label; node label not matched: nodePattern; unknown node: no such node).",
                  ["reason"])
for _result in ("ok", "error"):
    QUERIES.labels(_result)
for _reason in utilization.IGNORED_REASONS:
    IGNORED.labels(_reason)

# states of the source
STARTING, FRESH, FAILING, STALE = "starting", "fresh", "failing", "stale"


@dataclass(frozen=True)
class Status:
    """The source as the health detail shows it."""

    url: str
    state: str = STARTING
    detail: str = "no query answered yet"
    since: float = 0.0  # unix time the state began

    def line(self) -> str:
        began = datetime.datetime.fromtimestamp(self.since, datetime.timezone.utc).strftime("%H:%M:%SZ")
        effect = "; nodes score neutral (or by their annotation)" if self.state in (STALE, STARTING) else ""
        return f"prometheus {self.url}: {self.state} since {began}: {self.detail}{effect}"


class Poller:
    """Asks the source every refreshSeconds on a daemon thread until `stop()`; never dies of an error."""

    def __init__(self, source: profile.PrometheusSource, publish: Callable[[utilization.Readings | None], None]):
        self.source = source
        self.publish = publish
        self.client = prometheus.Client(source)
        self.mapping = source.mapping()
        self.status = Status(source.url, since=time.time())
        self.last_success: float | None = None  # time.monotonic()
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="utilization", daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.client.close()

    def _run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                self.refresh()
            except Exception:  # a bug: say so and go on at the next refresh
                log.exception("refreshing the live GPU utilization failed; trying again")
            self.stopped.wait(max(0.0, self.source.refresh_seconds - (time.monotonic() - started)))

    def refresh(self) -> None:
        started = time.monotonic()
        try:
            readings = utilization.read(utilization.vector_of(self.client.query(self.source.promql)),
                                        mapping=self.mapping, unit=self.source.unit)
        except (prometheus.QueryFailed, utilization.QueryError) as err:
            if self.stopped.is_set():
                return
            QUERIES.labels("error").inc()
            UP.set(0)
            self._failed(str(err))
            return
        if self.stopped.is_set():
            return
        now = time.monotonic()
        DURATION.observe(now - started)
        QUERIES.labels("ok").inc()
        UP.set(1)
        STALE_READINGS.set(0)
        LAST_SUCCESS.set(time.time())
        self.last_success = now
        for reason, count in readings.ignored.items():
            IGNORED.labels(reason).inc(count)
        self.publish(readings)
        gpus = sum(len(per_node) for per_node in readings.gpus.values())
        left_out = sum(readings.ignored.values())
        self._become(FRESH, f"{len(readings.nodes)} nodes and {gpus} GPUs from {readings.samples} series"
                            + (f" ({left_out} left out)" if left_out else ""))

    def _failed(self, error: str) -> None:
        age = None if self.last_success is None else time.monotonic() - self.last_success
        if age is not None and age <= self.source.max_age_seconds:
            self._become(FAILING, f"{error}; the readings of {age:.0f} s ago stay in force until they are "
                                  f"{self.source.max_age_seconds:g} s old")
            return
        if self.status.state in (FRESH, FAILING):
            self.publish(None)
        STALE_READINGS.set(1)
        self._become(STALE if self.last_success is not None else STARTING, error)

    def _become(self, state: str, detail: str) -> None:
        changed = state != self.status.state
        self.status = Status(self.source.url, state, detail, time.time() if changed else self.status.since)
        if changed:
            (log.info if state == FRESH else log.warning)("live GPU utilization: %s", self.status.line())


class LiveUtilization(Plugin):
    name = "utilization"

    def __init__(self, handle: Handle):
        super().__init__(handle)
        self.poller: Poller | None = None
        self.configure(handle.settings)

    def configure(self, settings: config.Config) -> None:
        source = settings.scheduling.prometheus
        if self.poller is not None and self.poller.source == source:
            return
        if self.poller is not None:
            self.poller.stop()
            self.handle.post(self._apply, None)
        self.poller = None
        UP.set(0)
        STALE_READINGS.set(1 if source is not None else 0)
        if source is not None:
            self.poller = Poller(source, lambda readings: self.handle.post(self._apply, readings)).start()

    def _apply(self, readings: utilization.Readings | None) -> None:
        """Where the model may be touched (the loop thread; the extender's lock)."""
        unknown = self.handle.model.cluster.set_live_utilization(readings)
        if readings is not None:
            for name in unknown:
                IGNORED.labels(utilization.UNKNOWN_NODE).inc(readings.series.get(name, 0))
        NODES.set(0 if readings is None else len(readings.nodes) - len(unknown))

    def health(self) -> str:
        """One line for the health detail."""
        if self.poller is None:
            return "no live source (scheduling.utilization.prometheus): node annotations only"
        return self.poller.status.line()

    def stop(self) -> None:
        if self.poller is not None:
            self.poller.stop()
