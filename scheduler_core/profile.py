"""The scheduling profile: what `scheduling:` in config.yaml tells the core, parsed already.

As a kube-scheduler profile holds its plugins' weights, this holds the node and GPU policies, the
score weights, the deletion-cost warm-up and the few names the core reads. `webhook.config` parses
the whole file and builds these; the core takes them as plain frozen values and never parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from scheduler_core import utilization

# Annotations the webhook writes and the core reads.
RULE_ANNOTATION = "gpu-scheduler.io/rule"  # the rule that matched (reported by `simulate`)
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
# The cost the webhook wrote, so the warm-up raises only a cost nobody changed since.
INITIAL_COST_ANNOTATION = "gpu-scheduler.io/initial-deletion-cost"

# Score plugins of scheduler_core and their default weights (scheduling.weights overrides).
SCORE_PLUGINS: dict[str, int] = {
    "gpu-placement": 1,  # binpack / spread across nodes and GPU devices
    "zone-balance": 4,  # spread GPU use across zones, so zone-constrained groups find room (packing within one)
    "node-resources": 1,  # cpu and memory, following nodePolicy
    "balanced-allocation": 1,  # upstream's NodeResourcesBalancedAllocation: cpu and memory used alike
    "image-locality": 1,  # upstream's ImageLocality: nodes that hold the pod's images already
    "gpu-utilization": 1,  # prefer GPUs that are less busy right now
    "spot": 2,  # the pod's spot preference
    "locality": 2,  # near pods of the same application: same node, then same zone
    "node-affinity": 2,  # preferred node affinity terms, as upstream
    "taint-toleration": 3,  # fewer untolerated PreferNoSchedule taints, as upstream
    "inter-pod-affinity": 2,  # preferred pod (anti-)affinity, and placed pods' affinity towards the pod, as upstream
    "pod-topology-spread": 2,  # ScheduleAnyway topology spread constraints, as upstream
    "dynamic-resources": 1,  # DRA: nodes where a claim's earlier firstAvailable alternative fits, as upstream
    "dra-devices": 1,  # DRA: binpack / spread across nodes by the share of their devices in use
    "dra-demand": 1,  # DRA: take the devices the cluster's claims need least
    # placement quality (scheduler_core.placement): the published baselines, off unless weighted ...
    "random": 0,
    "bestfit": 0,
    "dotproduct": 0,
    "gpupacking": 0,
    "fgd": 0,
    # ... and ours, the default: usable GPU lost to fragmentation, cpu/memory stranding and model contention
    "gpu-fragmentation": 10,
    # ... and the room constrained groups (host ports, required pod anti-affinity and affinity) still have
    "group-room": 40,
}
Policy = Literal["binpack", "spread"]
POLICIES: tuple[Policy, ...] = ("binpack", "spread")


@dataclass(frozen=True)
class Warmup:
    seconds: int = 60  # Ready this long before the deletion cost is raised
    cost: int = 0  # the warmed deletion cost


@dataclass(frozen=True)
class PrometheusSource:
    """Where live GPU utilization comes from (`scheduling.utilization.prometheus`): an instant query against a
    Prometheus HTTP API, asked every `refresh_seconds` outside the scheduling loop. Client options as Prometheus'
    own scrape configs name them (tls_config, bearer_token_file)."""

    url: str  # the Prometheus base URL (http or https), e.g. https://prometheus.monitoring.svc:9090
    query: str | None = None  # one value per GPU (or per node), in `unit`; None: utilization.default_query
    unit: utilization.Unit = "percent"  # of the query's values: percent (0..100, dcgm-exporter's) or ratio (0..1)
    node_label: str = utilization.DEFAULT_NODE_LABEL  # the series label that names the node
    node_pattern: str | None = None  # a regex over that label; its first group (or the whole match) is the node
    refresh_seconds: float = 15.0  # between queries
    max_age_seconds: float = 60.0  # readings older than this are dropped: the score turns neutral
    timeout_seconds: float = 5.0  # of one query
    ca_file: str | None = None  # PEM bundle that signs the server's certificate (default: the system's)
    cert_file: str | None = None  # client certificate and key, for mutual TLS
    key_file: str | None = None
    insecure_skip_verify: bool = False  # do not verify the server's certificate (tests only)
    bearer_token_file: str | None = None  # re-read at every query, so a rotated token is picked up

    @property
    def promql(self) -> str:
        """The query asked: the configured one, or dcgm-exporter's utilization by this node label."""
        return self.query if self.query is not None else utilization.default_query(self.node_label)

    def mapping(self) -> utilization.NodeMapping:
        pattern = re.compile(self.node_pattern) if self.node_pattern is not None else None
        return utilization.NodeMapping(self.node_label, pattern)


@dataclass(frozen=True)
class Scheduling:
    node_policy: Policy = "binpack"  # across nodes
    gpu_policy: Policy = "binpack"  # across the GPUs of one node
    weights: tuple[tuple[str, int], ...] = ()  # score plugin name -> weight, over SCORE_PLUGINS defaults
    warmup: Warmup = field(default_factory=Warmup)
    locality_labels: tuple[str, ...] = ("app.kubernetes.io/part-of", "app")  # first present names the app
    utilization_max_age_seconds: int = 300  # older gpu-utilization node annotations are ignored
    prometheus: PrometheusSource | None = None  # live utilization, which wins over the node annotation

    def weight_of(self, plugin: str) -> int:
        return dict(self.weights).get(plugin, SCORE_PLUGINS[plugin])
