"""Pod topology spread beyond upstream's tables: how constraints are read (and refused), what a decision costs
when nobody uses them, the filter and score among the other plugins, the places they reach (the extender,
`simulate`), and the system defaults of a pod declaring none (its controller, its default selector, the score)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import framework, plugins, podaffinity, profile, spread
from tests.unit.builders import facts, node, planted, pod, scheduler, simulate
from webhook import config

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
MISMATCH = "node(s) didn't match pod topology spread constraints"


def constraint(key: str = HOST, action: str = "DoNotSchedule", max_skew: int = 1, **more: Any) -> dict[str, Any]:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": action,
            "labelSelector": {"matchLabels": {"app": "web"}}, **more}


def web(name: str, *constraints: dict[str, Any], labels: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, cpu="1", labels=labels or {"app": "web"}, **kwargs)
    if constraints:
        obj["spec"]["topologySpreadConstraints"] = list(constraints)
    return obj


def placed(s: framework.Framework, *objs: dict[str, Any]) -> framework.Framework:
    for obj in objs:
        s.cluster.restore(facts(obj))
    return s


# --- reading constraints --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("constraints", "problem"), [
    ("spread", 'spec.topologySpreadConstraints: must be a list, got "spread"'),
    ([constraint(max_skew=0)], 'spec.topologySpreadConstraints[0].maxSkew: must be a positive 32-bit integer, got "0"'),
    ([constraint(max_skew=2**31)],
     'spec.topologySpreadConstraints[0].maxSkew: must be a positive 32-bit integer, got "2147483648"'),
    ([constraint(minDomains=True)],
     'spec.topologySpreadConstraints[0].minDomains: must be a positive 32-bit integer, got "True"'),
    ([constraint(key="")], 'spec.topologySpreadConstraints[0].topologyKey: must be a label key, got ""'),
    ([{"maxSkew": 1, "topologyKey": HOST}],  # whenUnsatisfiable has no default: the apiserver requires it
     'spec.topologySpreadConstraints[0].whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, got "None"'),
    ([constraint(nodeTaintsPolicy="Always")],
     'spec.topologySpreadConstraints[0].nodeTaintsPolicy: must be Honor or Ignore, got "Always"'),
    ([constraint(matchLabelKeys="app")],
     'spec.topologySpreadConstraints[0].matchLabelKeys: must be a list of label keys, got "app"'),
    ([constraint(labelSelector={"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]})],
     'obtaining pod\'s hard topology spread constraints: "Equals" is not a valid label selector operator'),
])
def test_a_constraint_the_apiserver_or_kube_scheduler_would_refuse_makes_the_pod_unschedulable(constraints, problem):
    obj = web("p")
    obj["spec"]["topologySpreadConstraints"] = constraints
    parsed = facts(obj)
    assert parsed.problems == (problem,)
    assert scheduler(node("a")).decide(parsed).reason == problem


def test_a_soft_constraint_kube_scheduler_cannot_read_fails_the_pod_only_when_it_would_score():
    """Upstream reads ScheduleAnyway constraints at PreScore, which it reaches only with more than one node."""
    bad = constraint(action="ScheduleAnyway", labelSelector={"matchLabels": {"app": "-web"}})
    parsed = facts(web("p", bad))
    assert parsed.problems == () and parsed.topology_spread is not None
    assert scheduler(node("a")).decide(parsed).node == "a"
    assert scheduler(node("a"), node("b")).decide(parsed).reason == (
        'obtaining pod\'s soft topology spread constraints: values[0][app]: Invalid value: "-web": a valid label '
        "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?') (needed to score the 2 nodes that fit)")
    off = profile.Scheduling(weights=(("pod-topology-spread", 0),))
    assert scheduler(node("a"), node("b"), scheduling=off).decide(parsed).node == "a"


def test_match_label_keys_add_the_pods_own_values_to_the_selector():
    """A rollout's new pods (pod-template-hash) spread among themselves, whatever the old ones do."""
    keyed = constraint(matchLabelKeys=["pod-template-hash", "absent"])
    new = {"app": "web", "pod-template-hash": "new"}
    s = placed(scheduler(node("a"), node("b")), web("old-0", node_name="b", labels={"app": "web", "pod-template-hash": "old"}),
               web("new-0", node_name="a", labels=new))
    assert s.decide(facts(web("new-1", keyed, labels=new))).node == "b"
    assert s.decide(facts(web("old-1", keyed, labels={"app": "web", "pod-template-hash": "old"}))).node == "a"
    nil = facts(web("p", {**constraint(matchLabelKeys=["app"]), "labelSelector": None}))
    assert nil.topology_spread is not None and nil.topology_spread.hard[0].selector is None  # still selects nothing


CONSTRAINT_PATHS = [("labelSelector",), ("labelSelector", "matchLabels"), ("labelSelector", "matchExpressions"),
                    ("maxSkew",), ("minDomains",), ("topologyKey",), ("whenUnsatisfiable",), ("matchLabelKeys",),
                    ("nodeAffinityPolicy",), ("nodeTaintsPolicy",)]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(CONSTRAINT_PATHS), value=json_values, soft=st.booleans())
def test_any_json_in_a_constraint_becomes_constraints_or_a_bounded_problem_and_is_decided(path, value, soft):
    one = planted(constraint(action="ScheduleAnyway" if soft else "DoNotSchedule"), path, value)
    incoming = facts(web("p", one))
    assert all(len(problem) < 4096 for problem in incoming.problems)
    s = placed(scheduler(node("a"), node("b", zone="zone-b")), web("q", one, node_name="a"))
    s.decide(incoming)
    s.decide(facts(web("r")))


# --- decisions ----------------------------------------------------------------------------------------------


def test_a_burst_of_replicas_spreads_over_zones_as_each_counts_the_ones_decided_before():
    s = scheduler(node("a1", zone="z1"), node("a2", zone="z1"), node("b1", zone="z2"), node("c1", zone="z3"))
    zones = []
    for i in range(9):
        decision = s.place(facts(web(f"w{i}", constraint(ZONE))))
        assert decision.node is not None
        zones.append(s.cluster.node(s.cluster.index[decision.node]).zone)
    assert sorted(zones) == ["z1"] * 3 + ["z2"] * 3 + ["z3"] * 3


def test_every_node_with_the_keys_is_a_domain_and_a_node_without_them_fails_under_the_first_it_lacks():
    """The cordoned node d, which no pod can go to, is a domain all the same (upstream counts every node): its 0
    is the lowest count. c lacks the zone, so it is no domain of either constraint; it passes the hostname one
    and fails the zone one for the missing label."""
    s = placed(scheduler(node("a", zone="z1"), node("b", zone="z1"), node("c", zone=None),
                         node("d", zone="z2", unschedulable=True)),
               web("w0", node_name="a"), web("w1", node_name="b"))
    assert s.decide(facts(web("p", constraint(HOST), constraint(ZONE)))).reason == (
        f"0/4 nodes are available: 2 {MISMATCH}, 1 {MISMATCH} (missing required label), "
        "1 node(s) were unschedulable.")


def test_nodes_the_pod_may_not_use_make_no_domain_unless_the_policy_says_so():
    """Honor (the default): a node outside the pod's nodeSelector is no domain, so its emptiness does not hold
    the others back; Ignore: it is one, and the pod may not pile up elsewhere."""
    s = placed(scheduler(node("a", labels={"pool": "x"}), node("b", labels={"pool": "x"}), node("c")),
               web("w0", node_name="a"), web("w1", node_name="b"))
    honor = facts(web("p", constraint(), node_selector={"pool": "x"}))
    ignore = facts(web("p", constraint(nodeAffinityPolicy="Ignore"), node_selector={"pool": "x"}))
    assert s.decide(honor).node == "a"
    assert s.decide(ignore).reason == (
        f"0/3 nodes are available: 2 {MISMATCH}, 1 node(s) didn't match Pod's node affinity/selector.")


def test_the_score_prefers_the_emptier_domain_and_counts_with_its_weight():
    s = placed(scheduler(node("a"), node("b"), node("c")), web("w0", node_name="a"), web("w1", node_name="b"))
    decision = s.decide(facts(web("p", constraint(action="ScheduleAnyway"))), explain=True)
    assert decision.node == "c" and decision.scores is not None
    assert decision.scores["c"]["pod-topology-spread"] == 2 * 100.0
    assert decision.scores["a"]["pod-topology-spread"] == 0.0


def test_the_hostname_key_is_scored_per_node_even_where_nodes_share_its_value():
    """Upstream counts a hostname constraint's pods on the node itself, not over the nodes sharing the value."""
    s = placed(scheduler(node("a", labels={HOST: "same"}), node("b", labels={HOST: "same"}), node("c")),
               web("w0", node_name="a"), web("w1", node_name="a"), web("w2", node_name="c"))
    cycle = s._cycle(facts(web("p", constraint(action="ScheduleAnyway"))))
    rows = np.array([s.cluster.index[name] for name in ("a", "b", "c")])
    assert list(plugins.pod_topology_spread_preference(cycle, rows)) == [0.0, 100.0, 33.0]


def test_nobody_using_topology_spread_costs_the_plugins_nothing(monkeypatch):
    """No constraints, and none by default (nothing selects the pod): neither half computes a topology domain or
    counts the placed pods."""
    def refuse(*_: Any) -> None:
        raise AssertionError("counted placed pods for a pod without spread constraints")

    monkeypatch.setattr(podaffinity.PodIndex, "counted", refuse)
    s = placed(scheduler(*(node(f"n{i}") for i in range(50))), *(web(f"w{i}", node_name=f"n{i}") for i in range(50)))
    s.cluster.default_selectors = known(("Service", selecting("Service", "db", {"app": "db"})))
    cycle = s._cycle(facts(web("p")))
    assert plugins.pod_topology_spread(cycle) == []
    assert not plugins.pod_topology_spread_preference(cycle, np.arange(50)).any()
    assert s.decide(facts(web("p"))).node is not None
    assert not any("topology" in str(key) for key in cycle.caches)


def test_the_extender_leaves_topology_spread_to_kube_scheduler():
    s = placed(scheduler(node("a"), node("b")), web("w0", node_name="a"), web("w1", node_name="a"))
    incoming = facts(web("w2", constraint()))
    assert s.decide(incoming).node == "b"
    feasible, failed, _ = s.evaluate(incoming, ["a"])
    assert feasible == ["a"] and failed == {}


def test_simulate_spreads_the_pending_replicas():
    pending = [web(f"w{i}", constraint(ZONE), namespace="apps") for i in range(4)]
    result = simulate([node("a", zone="z1"), node("b", zone="z2")], pending, config.Config())
    assert sorted(p.node for p in result.placements) == ["a", "a", "b", "b"]


# --- the system defaults, for a pod declaring no constraints ----------------------------------------------------


def owned(obj: dict[str, Any], kind: str = "ReplicaSet", name: str = "web-7d9", **reference: Any) -> dict[str, Any]:
    api_version = "v1" if kind == "ReplicationController" else "apps/v1"
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": "u",
                                           "controller": True, **reference}]
    return obj


def selecting(kind: str, name: str, selector: Any, namespace: str = "ns") -> tuple[str, str, Any]:
    return spread.DefaultSelectors.read(kind, {"metadata": {"name": name, "namespace": namespace},
                                               "spec": {"selector": selector}})


def known(*objects: tuple[str, tuple[str, str, Any]]) -> spread.DefaultSelectors:
    """Every kind listed, holding `objects` ((kind, read object) pairs)."""
    found = spread.DefaultSelectors()
    for kind in spread.SELECTING_KINDS:
        found.relisted(kind, [read for of_kind, read in objects if of_kind == kind])
    return found


def shown(selector: podaffinity.Selector) -> str | None:
    return None if selector is None else ", ".join(f"{r.key} {r.operator} {'|'.join(r.values)}" for r in selector)


@pytest.mark.parametrize(("references", "controller"), [
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}], ("ReplicaSet", "rs")),
    ([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": True}], ("StatefulSet", "db")),
    ([{"apiVersion": "v1", "kind": "ReplicationController", "name": "rc", "controller": True}],
     ("ReplicationController", "rc")),
    ([{"apiVersion": "/v1", "kind": "ReplicationController", "name": "rc", "controller": True}],  # ParseGroupVersion
     ("ReplicationController", "rc")),
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}], None),  # an owner, not the controller
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": False}], None),
    ([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True},  # the first controller decides
      {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}], None),
    ([{"apiVersion": "apps/v1beta2", "kind": "ReplicaSet", "name": "rs", "controller": True}], None),
    ([{"apiVersion": "v1", "kind": "ReplicaSet", "name": "rs", "controller": True}], None),
    ([{"apiVersion": "apps/v1/x", "kind": "ReplicaSet", "name": "rs", "controller": True}], None),
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r" * 254, "controller": True}], None),
    ("rs", None), ([None, 3], None), (None, None),
])
def test_a_pods_controller_is_the_first_controlling_reference_of_the_kinds_default_spreading_reads(references,
                                                                                                    controller):
    obj = web("p")
    obj["metadata"]["ownerReferences"] = references
    assert facts(obj).controller == controller


@pytest.mark.parametrize(("objects", "controller", "selector"), [
    # Services of the pod's namespace that select it, merged; a Service of another namespace, one that does not
    # select the pod, and one without a selector add nothing
    ([("Service", selecting("Service", "web", {"app": "web"})),
      ("Service", selecting("Service", "tier", {"tier": "front", "app": "web"})),
      ("Service", selecting("Service", "db", {"app": "db"})),
      ("Service", selecting("Service", "away", {"zone": "x"}, namespace="other")),
      ("Service", selecting("Service", "external", None))], None, "app In web, tier In front"),
    ([("Service", selecting("Service", "blank", {"track": ""}))], None, None),  # it lacks `track`: not selected
    # a ReplicationController's map is merged in, its values winning; a ReplicaSet's requirements are ANDed
    ([("Service", selecting("Service", "web", {"app": "web"})),
      ("ReplicationController", selecting("ReplicationController", "web-7d9", {"app": "old", "v": "1"}))],
     ("ReplicationController", "web-7d9"), "app In old, v In 1"),
    ([("Service", selecting("Service", "web", {"app": "web"})),
      ("ReplicaSet", selecting("ReplicaSet", "web-7d9", {"matchLabels": {"app": "other"},
                                                          "matchExpressions": [{"key": "v", "operator": "Exists"}]}))],
     ("ReplicaSet", "web-7d9"), "app In web, app In other, v Exists "),
    # a ReplicaSet's selector that does not parse, or of another name or kind, adds nothing
    ([("ReplicaSet", selecting("ReplicaSet", "web-7d9", {"matchLabels": {"app": "-bad"}})),
      ("ReplicaSet", selecting("ReplicaSet", "web-8e0", {"matchLabels": {"v": "2"}})),
      ("StatefulSet", selecting("StatefulSet", "web-7d9", {"matchLabels": {"v": "3"}}))],
     ("ReplicaSet", "web-7d9"), None),
])
def test_the_default_selector_merges_the_services_selecting_the_pod_with_its_controllers(objects, controller,
                                                                                         selector):
    labels = {"app": "web", "tier": "front"}
    found = known(*objects).selector_for("ns", labels, controller and spread.Controller(*controller))
    assert shown(found) == (selector or "")
    assert spread.system_defaults(found) == (() if selector is None else (
        spread.Constraint(3, HOST, found), spread.Constraint(5, ZONE, found)))


def test_the_default_selector_is_not_known_before_the_services_and_the_controllers_kind_have_been_listed():
    found = spread.DefaultSelectors()
    found.set("Service", *selecting("Service", "web", {"app": "web"}))  # an event: listing is what makes it known
    found.relisted("ReplicaSet", [selecting("ReplicaSet", "web-7d9", {"matchLabels": {"v": "1"}})])
    rs = spread.Controller("ReplicaSet", "web-7d9")
    assert found.selector_for("ns", {"app": "web"}, rs) is None
    found.relisted("Service", [selecting("Service", "web", {"app": "web"})])
    assert shown(found.selector_for("ns", {"app": "web"}, rs)) == "app In web, v In 1"
    assert found.selector_for("ns", {"app": "web"}, spread.Controller("StatefulSet", "web")) is None


def replicas(count: int, *, namespace: str = "ns") -> list[dict[str, Any]]:
    """Pods of one ReplicaSet without constraints (and without the `app` label that `locality` gathers)."""
    return [owned(web(f"r{i}", labels={"tier": "web"}, namespace=namespace)) for i in range(count)]


@pytest.mark.parametrize(("objects", "per_node"), [
    (None, {"a": 6}),  # nothing listed: their default selector is not known
    ([("Service", selecting("Service", "db", {"tier": "db"}))], {"a": 6}),  # listed, and nothing selects them
    ([("ReplicaSet", selecting("ReplicaSet", "web-7d9", {"matchLabels": {"tier": "web"}}))], {"a": 2, "b": 2, "c": 2}),
])
def test_replicas_spread_by_the_system_defaults_once_their_replica_set_is_known(objects, per_node):
    """Binpack piles the replicas onto one node unless their default selector is known and not empty; then each
    counts the ones placed before it."""
    s = scheduler(node("a", gpus=0), node("b", gpus=0), node("c", gpus=0))
    if objects is not None:
        s.cluster.default_selectors = known(*objects)
    assert Counter(s.place(facts(obj)).node for obj in replicas(6)) == per_node


def test_with_the_system_defaults_a_node_without_the_zone_is_scored_and_counts_in_the_empty_zone():
    """requireAllTopologies is false: b, without a zone, is a candidate like the others and gets only its hostname
    term; a, whose zone is "", shares its count with the nodes without one (upstream reads a missing label as "")."""
    s = placed(scheduler(node("a", gpus=0, zone=None, labels={ZONE: ""}), node("b", gpus=0, zone=None),
                         node("c", gpus=0, zone="z1"), node("d", gpus=0, zone=None)),
               *(owned(web(f"w{i}", labels={"tier": "web"}, node_name="d")) for i in range(2)))
    s.cluster.default_selectors = known(("ReplicaSet", selecting("ReplicaSet", "web-7d9", {"matchLabels": {}})),
                                        ("Service", selecting("Service", "web", {"tier": "web"})))
    cycle = s._cycle(facts(replicas(1)[0]))
    rows = np.array([s.cluster.index[name] for name in ("a", "b", "c")])
    # raw sums: a 2 + (2 log(2 + 2) + 4) = 9, b 2, c 2 + 4 = 6
    assert list(plugins.pod_topology_spread_preference(cycle, rows)) == [22.0, 100.0, 55.0]
