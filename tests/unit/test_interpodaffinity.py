"""Inter-pod affinity beyond upstream's tables: how terms are read (and refused), what a decision costs when
nobody uses them, the score among the others, and the places the terms reach (the extender, `simulate`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import framework, nodes, plugins, profile
from tests.unit.builders import facts, node, planted, pod, scheduler, simulate
from webhook import config

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def term(topology_key: str = HOST, **selector: Any) -> dict[str, Any]:
    return {"labelSelector": selector or {"matchLabels": {"app": "web"}}, "topologyKey": topology_key}


def required(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(kind: str, weight: int, one: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": one}]}}


def web(name: str, **kwargs: Any) -> dict[str, Any]:
    return pod(name, cpu="1", labels={"app": "web"}, **kwargs)


def placed(s: framework.Framework, *objs: dict[str, Any]) -> framework.Framework:
    for obj in objs:
        s.cluster.restore(facts(obj))
    return s


# --- reading terms ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "problem"), [
    ({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]},
     'parsing pod: requiredAffinityTerms: "Equals" is not a valid label selector operator'),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]},
     "parsing pod: requiredAffinityTerms: values: Invalid value: []string{}: for 'in', 'notin' operators, "
     "values set can't be empty"),
    ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
     'parsing pod: requiredAffinityTerms: values: Invalid value: []string{"x"}: values set must be empty for '
     "exists and does not exist"),
    ({"matchLabels": {"a/b/c": "x"}},
     'parsing pod: requiredAffinityTerms: key: Invalid value: "a/b/c": a valid label key must consist of '
     "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
     "'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
     "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ({"matchLabels": {"Example.com/app": "-x"}},
     'parsing pod: requiredAffinityTerms: [key: Invalid value: "Example.com/app": prefix part a lowercase RFC '
     "1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
     "with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*"
     "[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), values[0][Example.com/app]: Invalid value: \"-x\": a "
     "valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
     "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
     "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')]"),
])
def test_a_selector_upstream_cannot_read_makes_the_pod_unschedulable_with_its_message(selector, problem):
    parsed = facts(pod("p", affinity=required("podAffinity", {"labelSelector": selector, "topologyKey": HOST})))
    assert parsed.problems == (problem,) and parsed.pod_affinity is None
    assert scheduler(node("a")).decide(parsed).reason == problem


def test_each_kind_of_term_is_read_on_its_own_and_the_complaints_are_aggregated():
    bad = {"labelSelector": {"matchLabels": {"app": "-"}}, "topologyKey": HOST}
    affinity = {**required("podAntiAffinity", term()), **preferred("podAffinity", 5, bad)}
    affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 0, "podAffinityTerm": term()}]
    parsed = facts(pod("p", affinity=affinity))
    assert parsed.pod_affinity is not None and len(parsed.pod_affinity.anti_required) == 1
    assert not parsed.pod_affinity.preferred and not parsed.pod_affinity.anti_preferred
    [problem] = parsed.problems
    assert problem.startswith("parsing pod: [preferredAffinityTerms: values[0][app]: Invalid value: \"-\": ")
    assert problem.endswith(", preferredAntiAffinityTerms: weight: Invalid value: \"0\": must be an integer "
                            "from 1 to 100]")


def test_the_terms_default_to_the_pods_own_namespace_and_match_label_keys_are_the_apiservers_business():
    """The apiserver merges matchLabelKeys into labelSelector when it creates the pod; the scheduler reads only
    labelSelector, so a key left there unmerged (a pod written before 1.33's merge) selects nothing more."""
    one = {**term(), "matchLabelKeys": ["pod-template-hash"], "mismatchLabelKeys": ["tenant"]}
    parsed = facts(pod("p", namespace="team-a", affinity=required("podAntiAffinity", one)))
    assert parsed.pod_affinity is not None
    [read] = parsed.pod_affinity.anti_required
    assert read.namespaces == frozenset({"team-a"}) and read.namespace_selector is None
    assert read.matches("team-a", {"app": "web", "pod-template-hash": "x"}, {})
    assert not read.matches("team-b", {"app": "web"}, {})
    with_selector = facts(pod("p", affinity=required("podAffinity", {**term(), "namespaceSelector": {}})))
    assert with_selector.pod_affinity is not None
    assert with_selector.pod_affinity.required[0].namespaces == frozenset()  # {} selects every namespace instead


TERM_PATHS = [("labelSelector",), ("labelSelector", "matchLabels"), ("labelSelector", "matchExpressions"),
              ("namespaces",), ("namespaceSelector",), ("namespaceSelector", "matchLabels"), ("topologyKey",)]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(TERM_PATHS), value=json_values, expression=st.dictionaries(
    st.sampled_from(["key", "operator", "values"]), json_values, max_size=3), weighted=st.booleans())
def test_any_json_in_a_term_becomes_terms_or_a_bounded_problem_and_is_decided(path, value, expression, weighted):
    one = planted(term(matchExpressions=[expression]), path, value)
    affinity = preferred("podAntiAffinity", 7, one) if weighted else required("podAntiAffinity", one)
    incoming = facts(web("p", affinity=affinity))
    assert all(len(problem) < 4096 for problem in incoming.problems)
    s = placed(scheduler(node("a"), node("b")), web("q", node_name="a", affinity=affinity))
    s.decide(incoming)
    s.decide(facts(web("r")))


# --- decisions ----------------------------------------------------------------------------------------------


def test_replicas_that_want_one_zone_follow_the_first_wherever_it_went():
    """The first has no pod to be with and matches its own term, so it may go anywhere; the rest follow it."""
    s = scheduler(node("a", zone="z1"), node("b", zone="z2"), node("c", zone="z2"))
    together = required("podAffinity", term(ZONE))
    zones = set()
    for i in range(4):
        decision = s.place(facts(web(f"w{i}", affinity=together)))
        assert decision.node is not None
        zones.add(s.cluster.node(s.cluster.index[decision.node]).zone)
    assert len(zones) == 1
    stranger = facts(pod("x", labels={"app": "db"}, affinity=together))  # matches no pod, nor its own term
    s2 = scheduler(node("a"))
    assert s2.decide(stranger).reason == "0/1 nodes are available: 1 node(s) didn't match pod affinity rules."


def test_a_relabelled_node_changes_its_domain():
    s = placed(scheduler(node("a", zone="z1"), node("b", zone="z1")),
               web("w0", node_name="a", affinity=required("podAntiAffinity", term(ZONE))))
    assert s.decide(facts(web("w1"))).reason == (
        "0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules.")
    s.cluster.set_node(nodes.parse(node("b", zone="z2")))
    assert s.decide(facts(web("w1"))).node == "b"


def test_the_score_follows_preferred_affinity_and_counts_with_its_weight():
    s = placed(scheduler(node("a"), node("b"), node("c")), web("w0", node_name="b"))
    near = facts(pod("p", cpu="1", affinity=preferred("podAffinity", 50, term())))
    far = facts(pod("p", cpu="1", affinity=preferred("podAntiAffinity", 50, term())))
    assert s.decide(near, explain=True).node == "b"
    assert s.decide(far).node == "a"
    scores = s.decide(near, explain=True).scores
    assert scores is not None and scores["b"]["inter-pod-affinity"] == 2 * 100.0
    off = profile.Scheduling(weights=(("inter-pod-affinity", 0),))
    assert "inter-pod-affinity" not in (scheduler(node("a"), scheduling=off).decide(near, explain=True).scores or {})["a"]


def test_nobody_using_pod_affinity_costs_the_plugins_nothing():
    """No terms anywhere: neither half computes a topology domain or looks at the placed pods."""
    s = placed(scheduler(*(node(f"n{i}") for i in range(50))), *(web(f"w{i}", node_name=f"n{i}") for i in range(50)))
    cycle = s._cycle(facts(web("p")))
    assert plugins.inter_pod_affinity(cycle) == []
    assert not plugins.inter_pod_affinity_preference(cycle, np.arange(50)).any()
    assert not any("topology" in str(key) or "pod-affinity" in str(key) for key in cycle.caches)


def test_the_extender_leaves_inter_pod_affinity_to_kube_scheduler():
    """kube-scheduler has filtered the node already; the model's view of a namespace it has not listed
    must not turn it down either."""
    s = placed(scheduler(node("a")), web("w0", node_name="a", affinity=required("podAntiAffinity", term())))
    incoming = facts(web("w1", affinity=required("podAffinity", {**term(), "namespaceSelector": {
        "matchLabels": {"team": "a"}}})))
    assert s.decide(incoming).node is None
    feasible, failed, _ = s.evaluate(incoming, ["a"])
    assert feasible == ["a"] and failed == {}


def test_simulate_reads_namespace_labels_from_the_input():
    team = {"matchLabels": {"team": "a"}}
    pending = web("w1", namespace="apps", affinity=required("podAffinity", {**term(), "namespaceSelector": team}))
    bound = web("w0", namespace="data", node_name="b")
    spaces = [{"kind": "Namespace", "metadata": {"name": "data", "labels": {"team": "a"}}}]
    result = simulate([node("a"), node("b")], [bound, pending, *spaces], config.Config())
    assert [p.node for p in result.placements] == ["b", "b"]

