"""Live GPU utilization from a Prometheus instant query, as readings per node and per GPU.

Where GPU clusters keep utilization is Prometheus, scraped from NVIDIA's dcgm-exporter: one series per GPU,
`DCGM_FI_DEV_GPU_UTIL` in percent, labelled `Hostname` (the node), `gpu` (its index), `UUID` and `modelName`, and
with pod mapping on also `namespace`, `pod` and `container`. This module turns the result of the configured query
into readings the model takes (`Cluster.set_live_utilization`); the runtime's utilization plugin does the asking.

- A series names its node by a label (`Hostname` unless configured), optionally through a pattern whose first group
  is the node name (`(.*?)\\..*` for FQDNs, `(.*):\\d+` for an `instance`).
- A series with a `gpu` index or a `UUID` is one GPU's reading; the node's reading is the mean of its GPUs'. A series
  with neither is a node's reading as it stands (a query that aggregates by node).
- One GPU in several series (pod mapping, while the pods on it change or share it) counts its busiest reading.
- Values outside 0..100 percent (0..1 as a ratio), NaN and infinities are left out and counted by reason, so an
  exporter that misbehaves never steers placement.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Unit = Literal["percent", "ratio"]
UNITS: tuple[Unit, ...] = ("percent", "ratio")
DEFAULT_NODE_LABEL = "Hostname"  # dcgm-exporter's node name (NODE_NAME, as the GPU Operator deploys it)
GPU_INDEX_LABEL = "gpu"
GPU_UUID_LABEL = "UUID"
UNKNOWN = 0.5  # a node or GPU without a reading ranks between idle and busy ones (the neutral score)

# why a sample was left out (the values of the ignored-samples metric's `reason` label)
INVALID_VALUE = "invalid value"
NO_NODE_LABEL = "no node label"
NODE_NOT_MATCHED = "node label not matched"
UNKNOWN_NODE = "unknown node"
IGNORED_REASONS = (INVALID_VALUE, NO_NODE_LABEL, NODE_NOT_MATCHED, UNKNOWN_NODE)


def default_query(node_label: str = DEFAULT_NODE_LABEL) -> str:
    """dcgm-exporter's GPU utilization smoothed over 2 minutes, one series per GPU: only the labels read here are
    kept (the answer is a third the size, and a GPU that pod mapping splits over several series comes back once,
    at its busiest)."""
    return f"max by ({node_label}, {GPU_INDEX_LABEL}, {GPU_UUID_LABEL}) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[2m]))"


class QueryError(ValueError):
    """The answer is not a Prometheus instant vector (what is wrong, in words for the log and the health detail)."""


@dataclass(frozen=True)
class NodeMapping:
    """How a series names its node: the value of `label`, or the first group of `pattern` matched against it."""

    label: str = DEFAULT_NODE_LABEL
    pattern: re.Pattern[str] | None = None

    def node_of(self, value: str) -> str | None:
        """The node a value of `label` names, or None."""
        if self.pattern is None:
            return value or None
        found = self.pattern.fullmatch(value)
        if found is None:
            return None
        return (found.group(1) if self.pattern.groups else found.group(0)) or None


@dataclass(frozen=True)
class Readings:
    """What one query said, 0..1 busy: per node, per GPU index of a node, per GPU UUID; and what was left out."""

    nodes: Mapping[str, float] = field(default_factory=dict)
    gpus: Mapping[str, Mapping[int, float]] = field(default_factory=dict)  # node -> GPU index -> busy
    uuids: Mapping[str, float] = field(default_factory=dict)  # GPU UUID -> busy (NVIDIA's DRA devices carry it)
    series: Mapping[str, int] = field(default_factory=dict)  # node -> the series that named it
    ignored: Mapping[str, int] = field(default_factory=dict)  # reason -> samples left out
    samples: int = 0  # series in the answer


def vector_of(answer: Any) -> list[Mapping[str, Any]]:
    """The samples of an `/api/v1/query` answer (`{"status": "success", "data": {"resultType": "vector", ...}}`)."""
    if not isinstance(answer, Mapping):
        raise QueryError(f"the answer is not a JSON object, got {type(answer).__name__}")
    if answer.get("status") != "success":
        raise QueryError(f"the query failed: {answer.get('errorType', 'error')}: {answer.get('error', answer)}")
    data = answer.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, Mapping) else None
        raise QueryError(f"the query must return an instant vector, got resultType {kind!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise QueryError("data.result: must be a list")
    return result


def read(samples: Iterable[Mapping[str, Any]], *, mapping: NodeMapping = NodeMapping(),
         unit: Unit = "percent") -> Readings:
    """The readings in an instant vector's samples (`{"metric": {labels}, "value": [time, "42"]}`). One pass, few
    calls per sample: at 40,000 GPUs it runs every refresh, on a thread beside the scheduling loop."""
    scale = 100.0 if unit == "percent" else 1.0
    label, pattern = mapping.label, mapping.pattern
    ignored: Counter[str] = Counter()
    per_gpu: dict[str, dict[tuple[int | None, str | None], float]] = defaultdict(dict)
    per_node: dict[str, float] = {}
    series: Counter[str] = Counter()
    count = 0
    for sample in samples:
        count += 1
        try:
            labels = sample["metric"]
            number = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            ignored[INVALID_VALUE] += 1
            continue
        if not 0.0 <= number <= scale:  # NaN compares false too; infinities fall outside
            ignored[INVALID_VALUE] += 1
            continue
        node = labels.get(label) if isinstance(labels, dict) else None
        if node is None:
            ignored[NO_NODE_LABEL] += 1
            continue
        if pattern is not None:
            node = mapping.node_of(node)
        if not node:
            ignored[NODE_NOT_MATCHED] += 1
            continue
        busy = number / scale
        series[node] += 1
        index, uuid = labels.get(GPU_INDEX_LABEL), labels.get(GPU_UUID_LABEL) or None
        gpu = (int(index) if index.__class__ is str and index.isdigit() and len(index) < 6 else None, uuid)
        if gpu == (None, None):
            per_node[node] = max(busy, per_node.get(node, 0.0))
        else:
            kept = per_gpu[node]
            if busy >= kept.get(gpu, 0.0):
                kept[gpu] = busy
    nodes = dict(per_node)
    gpus: dict[str, dict[int, float]] = {}
    uuids: dict[str, float] = {}
    for node, readings in per_gpu.items():
        if node not in nodes:
            nodes[node] = sum(readings.values()) / len(readings)
        by_index: dict[int, float] = {}
        for (index, uuid), busy in readings.items():
            if index is not None and busy >= by_index.get(index, 0.0):
                by_index[index] = busy
            if uuid is not None and busy >= uuids.get(uuid, 0.0):
                uuids[uuid] = busy
        if by_index:
            gpus[node] = by_index
    return Readings(nodes=nodes, gpus=gpus, uuids=uuids, series=dict(series), ignored=dict(ignored), samples=count)


