"""The watched model's view as Prometheus series, for `run` and `extender` alike, so drift from the API
can be seen: GPUs allocated per node and model in the model (compare with the pods the API shows bound
there) and the GPUs there are, of the device plugin and of DRA alike, and the watched objects the model could not
take in. Read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from scheduler_core import watched


@dataclass(frozen=True)
class ModelView:
    """What a scrape reads of a watched model, copied out so the model's owner can hold its lock briefly."""

    use: list[tuple[str, str, float, int]] = field(default_factory=list)  # (node, GPU model, allocated, GPUs)
    rejected: Mapping[str, int] = field(default_factory=dict)  # objects not taken in, by kind

    @classmethod
    def of(cls, model: watched.WatchedCluster) -> ModelView:
        return cls(model.gpu_use(), dict(model.rejected))


class ModelCollector(Collector):
    """The view `read()` returns (None: no model yet), at each scrape."""

    def __init__(self, read: Callable[[], ModelView | None]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        allocated = GaugeMetricFamily("gpu_scheduler_allocated_gpus",
                                      "GPUs allocated (shares summed) in the scheduler's model, by node and model: "
                                      "the device plugin's (model label) and NVIDIA's DRA GPUs (product name).",
                                      labels=["node", "model"])
        gpus = GaugeMetricFamily("gpu_scheduler_gpus", "GPUs in the scheduler's model, by node and model, of both "
                                 "kinds as gpu_scheduler_allocated_gpus counts them.", labels=["node", "model"])
        rejected = CounterMetricFamily("gpu_scheduler_watch_objects_rejected",
                                       "Watched objects the model could not take in (each logged with its error), "
                                       "by kind.", labels=["kind"])
        view = self._read()
        if view is not None:
            for node, model, used, total in view.use:
                allocated.add_metric([node, model], used)
                gpus.add_metric([node, model], total)
            for kind, count in sorted(view.rejected.items()):
                rejected.add_metric([kind], count)
        yield allocated
        yield gpus
        yield rejected


def register(read: Callable[[], ModelView | None], registry: CollectorRegistry = REGISTRY) -> None:
    registry.register(ModelCollector(read))
