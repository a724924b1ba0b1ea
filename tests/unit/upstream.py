"""kube-scheduler's own plugin test tables, ported as data, run against the core.

Each file in tests/data/upstream/ holds the cases of one upstream plugin test (k8s.io/kubernetes
v1.36.3, `pkg/scheduler/framework/plugins/<plugin>/*_test.go`) as Kubernetes objects and expected
verdicts; the facts carry over, the code that checks them is ours. A file:

    plugin: NodePorts                # the name in scheduler_core.plugins.FILTERS (or SCORES for `score` cases)
    score_plugin: node-affinity      # optional: the name in SCORES when the file also has `score` cases
    source: pkg/scheduler/framework/plugins/nodeports/node_ports_test.go  # where the cases come from
    cases:
      - name: same port             # upstream's test name
        pod: {Pod object}            # the pod being scheduled
        nodes: [{Node object}, ...]  # optional; default: one node `node` (see DEFAULT_NODE)
        pods: [{Pod object}, ...]    # pods already there, each with spec.nodeName
        namespaces: [{Namespace}]    # optional, for plugins that read namespace labels
        objects: [{Service}, ...]    # optional: the Services, ReplicationControllers, ReplicaSets and StatefulSets,
                                     # and the storage objects (PersistentVolumeClaims, PersistentVolumes,
                                     # StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities, VolumeAttachments)
                                     # (each kind listed, if only as none, as upstream's informers are)
        prefilter: message           # or: upstream's PreFilter of the plugin rejects the pod whatever the node
        filter: {node: reason | null}  # upstream's verdict per node: null fits, else its reason
        score: {node: 0..100}        # or: the normalised score per feasible node
        candidates: [node, ...]      # optional, with `score`: the nodes that passed the filters (default: every
                                     # node); only they are scored, while pods on the others still count
        problem: text                # or: a problem the pod's facts carry, so it is never scheduled (upstream's
                                     # PreFilter or PreScore refuses the pod with this text)
        default_selector: {k: v}     # or: the pod's default selector for the system default spread constraints
        skip: why                    # optional: a case the core does not take, and why (a feature outside
                                     # a scheduler's filter, a field the API would refuse)

Upstream builds many objects with helpers (st.MakePod()...); the data spells out what they build,
defaults included (a node's allocatable is what the case gives it, nothing more). A pod or object without a
namespace (upstream's "") is put in `default`.

A test module needs no more than `@upstream.each_case(TABLE)` on a test that calls `upstream.check(TABLE, case)`,
or, the same in one line, `test_filter = upstream.test_of("<plugin>_filter")`.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from scheduler_core import framework, plugins, profile, spread, volumes, watched

DATA = Path(__file__).resolve().parent.parent / "data" / "upstream"
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
DEFAULT_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node", "labels": {}},
                "status": {"allocatable": {"pods": "110", "cpu": "100", "memory": "100Gi"}}}


def load(name: str) -> dict[str, Any]:
    """The table `name` (the file's stem); each case also gets an `id` for pytest."""
    table = yaml.safe_load((DATA / f"{name}.yaml").read_text())
    for case in table["cases"]:
        case["id"] = case["name"].replace(" ", "-")
    return table


def each_case(table: dict[str, Any]) -> pytest.MarkDecorator:
    """Parametrize a test by the table's cases, named by their ids; a case with `skip:` is skipped naming why."""
    return pytest.mark.parametrize("case", [
        pytest.param(case, id=case["id"], marks=[pytest.mark.skip(reason=case["skip"])] if "skip" in case else [])
        for case in table["cases"]])


def test_of(name: str) -> Callable[[dict[str, Any]], None]:
    """A test of every case of the table `name`, for a test module to hold under a name pytest collects."""
    table = load(name)

    @each_case(table)
    def test(case: dict[str, Any]) -> None:
        check(table, case)

    return test


def check(table: dict[str, Any], case: dict[str, Any]) -> None:
    """Assert what the case expects: its `problem` (a pod the core refuses to parse), its `filter` verdicts,
    its `score`s."""
    if "problem" in case:
        assert case["problem"] in " ".join(problems(case))
    if "prefilter" in case:
        assert pre_filter_message(case, table["plugin"]) == case["prefilter"]
    if "filter" in case:
        assert filter_verdicts(case, table["plugin"]) == case["filter"]
    if "score" in case:
        assert scores(case, table.get("score_plugin", table["plugin"])) == case["score"]
    if "default_selector" in case:
        assert default_selector(case) == case["default_selector"]


def model_of(case: dict[str, Any]) -> watched.WatchedCluster:
    """The watched model holding the case's nodes and pods, taken in as the watches take them in."""
    found = watched.WatchedCluster(scheduling=profile.Scheduling())
    nodes = [_ready(node) for node in case.get("nodes") or [DEFAULT_NODE]]
    found.nodes_relisted(nodes, now=NOW)
    found.pods_relisted([_with_uid(pod, f"existing-{i}") for i, pod in enumerate(case.get("pods") or [])], now=NOW)
    namespaces = case.get("namespaces")
    if namespaces is not None and hasattr(found, "namespaces_relisted"):
        found.namespaces_relisted(namespaces, now=NOW)
    objects = [_namespaced(obj) for obj in case.get("objects") or []]
    for kind in spread.SELECTING_KINDS:
        found.selectors_relisted(kind, [obj for obj in objects if obj["kind"] == kind], now=NOW)
    for kind in volumes.KINDS:
        found.storage_relisted(kind, [obj for obj in objects if obj["kind"] == kind], now=NOW)
    return found


def cycle_of(case: dict[str, Any]) -> tuple[watched.WatchedCluster, plugins.Cycle]:
    found = model_of(case)
    facts = found.facts_of(_with_uid(case["pod"], "incoming"))
    return found, framework.Framework(found.cluster)._cycle(facts)


def pre_filter_message(case: dict[str, Any], plugin: str) -> str | None:
    """The message with which the PreFilter of `plugin` rejects the pod whatever the node; None: it lets it on."""
    return dict(plugins.PRE_FILTERS)[plugin](cycle_of(case)[1])


def filter_verdicts(case: dict[str, Any], plugin: str) -> dict[str, str | None]:
    """node -> None when the filter `plugin` lets it through, else its reasons joined with ", " (after the plugin's
    PreFilter, if it has one, has let the pod on)."""
    found, cycle = cycle_of(case)
    pre_filter = dict(plugins.PRE_FILTERS).get(plugin)
    if pre_filter is not None:
        assert pre_filter(cycle) is None
    run = dict(plugins.FILTERS)[plugin]
    reasons: dict[int, list[str]] = {}
    for mask, reason in run(cycle):
        for row in np.flatnonzero(mask[: cycle.rows]):
            reasons.setdefault(int(row), []).append(reason)
    return {name: (", ".join(reasons[row]) if row in reasons else None)
            for name, row in found.cluster.index.items()}


def problems(case: dict[str, Any]) -> tuple[str, ...]:
    """The problems the case's pod carries once parsed: each makes it unschedulable before any filter runs."""
    return cycle_of(case)[1].pod.problems


def scores(case: dict[str, Any], plugin: str) -> dict[str, float]:
    """node -> the score plugin `plugin` gives it (0..100), over the case's candidates (default: every node)."""
    found, cycle = cycle_of(case)
    index = found.cluster.index
    rows = np.array(sorted(index[name] for name in case.get("candidates", index)), dtype=np.int64)
    values = plugins.SCORES[plugin](cycle, rows)
    return {found.cluster.node(int(row)).name: float(value) for row, value in zip(rows, values)}


def default_selector(case: dict[str, Any]) -> dict[str, str]:
    """The pod's default selector as the label set upstream's tables compare it with (each requirement `k=v`)."""
    found, cycle = cycle_of(case)
    pod = cycle.pod
    selector = found.cluster.default_selectors.selector_for(pod.namespace, pod.labels, pod.controller)
    assert selector is not None and all(req.operator == "In" and len(req.values) == 1 for req in selector)
    return {requirement.key: requirement.values[0] for requirement in selector}


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    """Upstream's plugin tests leave a node's conditions out (kube-scheduler filters not-ready nodes by their
    taints); the core also checks the Ready condition, so a node given none is taken as Ready."""
    node = copy.deepcopy(node)
    status = node.setdefault("status", {})
    if not any(c.get("type") == "Ready" for c in status.get("conditions") or []):
        status.setdefault("conditions", []).append({"type": "Ready", "status": "True"})
    return node


def _with_uid(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    pod = _namespaced(pod)
    pod["metadata"].setdefault("uid", uid)
    return pod


def _namespaced(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("namespace", "default")
    return obj
