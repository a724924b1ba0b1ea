"""Hostile input: whatever the apiserver accepts becomes facts, or a complaint about that object alone.

A tenant who may only create and patch pods in one namespace must not crash the scheduler,
corrupt its GPU accounting or fill its memory. Each break seen on a real cluster is a row
here with its exact message; the properties feed arbitrary values to the parsers and to the
cluster model and check that nothing escapes and the accounting stays whole.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import cluster, framework, nodes, podaffinity, pods, predicates, quantity, spread, watched
from scheduler_core.nodes import MAX_GPUS, MAX_MILLI
from tests.unit.builders import facts, node, planted, pod
from webhook import rules

LARGEST = 2**63 - 1
NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
MILLI_PROBLEM = "annotation gpu-scheduler.io/gpu-milli: must be an integer from 1 to 999 (thousandths of one GPU), got "
MEMORY_PROBLEM = "annotation gpu.nvidia.com/memory: must be a positive integer (MiB per GPU), got "
DEVICES_PROBLEM = ("annotation gpu-scheduler.io/gpu-devices: must be a JSON list of at most 128 GPUs "
                   'like [{"index": 0, "milli": 1000}], got ')


def model(*objs: dict[str, Any]) -> cluster.Cluster:
    c = cluster.Cluster()
    for obj in objs:
        c.set_node(nodes.parse(obj))
    return c


def strings_in(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from strings_in(getattr(value, field.name))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, (tuple, list, frozenset)):
        for item in value:
            yield from strings_in(item)


# --- known breaks, one row each ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({"gpu-scheduler.io/gpu-milli": "²"}, MILLI_PROBLEM + '"\\u00b2"'),
        ({"gpu-scheduler.io/gpu-milli": "٣"}, MILLI_PROBLEM + '"\\u0663"'),
        ({"gpu-scheduler.io/gpu-milli": "0" * 19 + "1"}, MILLI_PROBLEM + '"00000000000000000001"'),
        ({"gpu.nvidia.com/memory": "²"}, MEMORY_PROBLEM + '"\\u00b2"'),
        ({"gpu.nvidia.com/memory": "9" * 5000}, MEMORY_PROBLEM + f'"{"9" * 40}"… (5000 characters)'),
        ({"gpu.nvidia.com/model": "A" * 250_000},
         f'annotation gpu.nvidia.com/model: must be at most 256 characters, got "{"A" * 40}"… (250000 characters)'),
        ({"gpu-scheduler.io/spot": "x" * 1000},
         f'annotation gpu-scheduler.io/spot: must be one of prefer, avoid, require, forbid, got "{"x" * 40}"… '
         "(1000 characters)"),
    ],
    ids=["superscript-share", "arabic-share", "long-share", "superscript-memory", "5000-digit-memory",
         "250KiB-model", "long-spot"],
)
def test_annotation_values_the_apiserver_accepts_become_problems(annotations, problem):
    assert pods.parse(pod("p", annotations=annotations)).problems == (problem,)


@pytest.mark.parametrize(("value", "share"), [("250", Fraction(1, 4)), ("²", None), ("1" * 5000, None)])
def test_the_webhook_reads_a_share_as_the_scheduler_does(value, share):
    assert rules.gpu_demand(pod("p", annotations={"gpu-scheduler.io/gpu-milli": value}), ("nvidia.com/gpu",)) == share


@pytest.mark.parametrize(
    "text",
    [
        '[{"index": true}]',
        '[{"index": 0, "milli": true}]',
        '[{"index": 1.0}]',
        '[{"index": 99999999999999999999999}]',
        '[{"index": 128}]',
        "[" + ",".join(['{"index": 0}'] * 129) + "]",
        "[" * 3000,
        " " * pods.MAX_DEVICES_TEXT + "[]",
        '"[]"',
        "5",
    ],
    ids=["bool-index", "bool-milli", "float-index", "huge-index", "index-past-max", "129-entries", "deep-nesting",
         "too-long", "string", "number"],
)
def test_device_annotations_that_name_no_gpus_of_a_node_are_not_believed(text):
    assert pods.parse_devices(text) is None
    assert pods.parse(pod("p", annotations={pods.DEVICES_ANNOTATION: text})).devices_problem.startswith(DEVICES_PROBLEM)


def test_the_longest_device_list_of_a_node_is_read():
    devices = tuple(pods.Device(i, 1000) for i in range(MAX_GPUS))
    assert pods.parse_devices(pods.format_devices(devices)) == devices


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e2000000000", LARGEST),
        ("9" * 5000, LARGEST),
        ("-1e999999999999999999", -LARGEST),
        ("8Ei", LARGEST),
        ("0." + "0" * 5000 + "1", Fraction(1, 10**9)),
        ("1e-999999999999999999", Fraction(1, 10**9)),
        ("0.0000000001Ki", Fraction(103, 10**9)),  # 1.024e-7, rounded up to billionths as upstream
    ],
)
def test_absurd_quantities_are_capped_and_rounded_as_upstream(text, value):
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["٣", "²", "1e" + "9" * 19, "1" * 20000 + "x", "1" * 20000 + "." + "1" * 20000 + "x",
                                  float("nan"), float("inf")])
def test_strings_that_are_no_quantity_are_refused(text):
    with pytest.raises(quantity.QuantityError):
        quantity.parse(text)


def test_an_absurd_request_makes_its_node_look_full_and_leaves_no_trace():
    c = model(node("a", gpus=2))
    memory, row = c.column("memory"), c.index["a"]
    assert facts(pod("huge", mem="100P")).requests["memory"] == MAX_MILLI
    for name in ("huge", "huger"):
        assert c.restore(facts(pod(name, mem="1e2000000000", node_name="a"))) is None
    assert c.used[memory, row] == MAX_MILLI
    decision = framework.Framework(c).decide(facts(pod("small", mem="1Mi")))
    assert decision.node is None and "Insufficient memory" in decision.reason
    c.unassign("ns/huge")
    assert c.used[memory, row] == MAX_MILLI
    c.unassign("ns/huger")
    assert c.used[memory, row] == 0


def test_a_resource_first_seen_on_a_later_node_counts_the_pods_already_there():
    c = model(node("a"))
    c.restore(facts(pod("p", node_name="a", extra={"example.com/fpga": "2"})))
    c.set_node(nodes.parse(node("b", extra={"example.com/fpga": "4"})))
    column = c.column("example.com/fpga")
    assert c.used[column, c.index["a"]] == 2000
    c.unassign("ns/p")
    assert c.used[column, c.index["a"]] == 0


EIGHT_SHARES = '[' + ",".join(f'{{"index":{i},"milli":1}}' for i in range(8)) + ']'


@pytest.mark.parametrize(
    ("kwargs", "recorded", "free", "report"),
    [
        ({"milli": 1}, '[{"index":0,"milli":1000}]', [999] + [1000] * 7,
         'annotation gpu-scheduler.io/gpu-devices [{"index":0,"milli":1000}] disagrees with the pod\'s request '
         "(1/1000 of one GPU); using GPU 0"),
        ({"gpus": 8}, EIGHT_SHARES, [0] * 8,
         'annotation gpu-scheduler.io/gpu-devices [{"index":0,"milli":1},{"index":1,"milli… (177 characters) '
         "disagrees with the pod's request (8 whole GPUs); using GPUs 0,1,2,3,4,5,6,7"),
        ({"gpus": 2}, '[{"index":3},{"index":3}]', [0, 0] + [1000] * 6,
         'annotation gpu-scheduler.io/gpu-devices [{"index":3,"milli":1000},{"index":3,"mi… (51 characters) '
         "disagrees with the pod's request (2 whole GPUs); using GPUs 0,1"),
        ({"gpus": 1}, '[{"index":9}]', [0] + [1000] * 7,
         'annotation gpu-scheduler.io/gpu-devices [{"index":9,"milli":1000}] does not fit node a (it has no GPU 9); '
         "using GPU 0"),
        ({"cpu": "1"}, '[{"index":2}]', [1000] * 8,
         'annotation gpu-scheduler.io/gpu-devices [{"index":2,"milli":1000}] disagrees with the pod\'s request '
         "(no GPU); using no GPU"),
        ({"gpus": 1}, "garbage", [0] + [1000] * 7, DEVICES_PROBLEM + '"garbage"; using GPU 0'),
        ({"gpus": 1}, '[{"index": true}]', [0] + [1000] * 7, DEVICES_PROBLEM + '"[{\\"index\\": true}]"; using GPU 0'),
        ({"gpus": 2}, '[{"index":2},{"index":5}]', [1000, 1000, 0, 1000, 1000, 0, 1000, 1000], None),
        ({"milli": 250}, '[{"index":3,"milli":250}]', [1000, 1000, 1000, 750] + [1000] * 4, None),
        ({"gpus": 1}, None, [0] + [1000] * 7, None),  # another scheduler's pod records nothing
    ],
    ids=["share-claims-whole-gpu", "whole-gpus-claim-shares", "one-gpu-twice", "no-such-gpu", "cpu-pod-claims-gpu",
         "not-json", "bool-index", "agrees-whole", "agrees-share", "none-recorded"],
)
def test_recorded_devices_are_believed_only_when_they_match_the_request(kwargs, recorded, free, report):
    c = model(node("a", gpus=8))
    annotations = {pods.DEVICES_ANNOTATION: recorded} if recorded is not None else {}
    assert c.restore(facts(pod("p", node_name="a", annotations=annotations, **kwargs))) == report
    row = c.index["a"]
    assert list(c.gpu_free[row, :8]) == free


def test_recorded_devices_taken_by_another_pod_are_reported():
    c = model(node("a", gpus=2))
    c.restore(facts(pod("first", gpus=1, node_name="a")))
    second = pod("second", gpus=1, node_name="a", annotations={pods.DEVICES_ANNOTATION: '[{"index":0}]'})
    assert c.restore(facts(second)) == ('annotation gpu-scheduler.io/gpu-devices [{"index":0,"milli":1000}] does not '
                                        "fit node a (GPU 0 has 0/1000 free); using GPU 1")


def test_a_decision_that_disagrees_with_the_request_is_refused():
    c = model(node("a", gpus=2))
    with pytest.raises(cluster.OvercommitError, match=r"ns/p: devices .* disagrees with the pod's request \(1 whole GPU\)"):
        c.assign(facts(pod("p", gpus=1)), "a", (pods.Device(0, 1),))


def test_facts_of_huge_annotations_keep_no_long_strings():
    huge = "x" * 250_000
    annotations = {name: huge for name in (pods.MODEL_ANNOTATION, pods.MEMORY_ANNOTATION, pods.MILLI_ANNOTATION,
                                           pods.SPOT_ANNOTATION, pods.DEVICES_ANNOTATION, "example.com/notes")}
    pod_facts = pods.parse(pod("p", node_name="a", annotations=annotations))
    node_facts = nodes.parse(node("a", annotations={nodes.UTILIZATION_ANNOTATION: huge,
                                                    nodes.UTILIZATION_TIME_ANNOTATION: huge}))
    assert len(pod_facts.problems) == 4 and pod_facts.devices_problem
    assert max(len(s) for s in strings_in((pod_facts, node_facts))) < 200


# --- wrong JSON types: the shapes a file (or a future API field) may hold ------------------------


@pytest.mark.parametrize(
    ("path", "value", "problems"),
    [
        (("spec", "priority"), "high", ('spec.priority: must be a 32-bit integer, got "high"',)),
        (("spec", "priority"), 2**40, ('spec.priority: must be a 32-bit integer, got "1099511627776"',)),
        (("spec", "priority"), True, ('spec.priority: must be a 32-bit integer, got "True"',)),
        (("spec", "containers"), 5, ('resources: spec.containers: expected a list of objects, got "5"',)),
        (("spec", "containers"), [None], ('resources: spec.containers: expected a list of objects, got "[None]"',)),
        (("spec", "containers"), [{"resources": []}], ('resources: resources: expected an object, got "[]"',)),
        (("spec", "containers"), [{"resources": {"limits": "abc"}}],
         ('resources: resources.limits: expected an object, got "abc"',)),
        (("spec", "overhead"), [1], ('resources: spec.overhead: expected an object, got "[1]"',)),
        (("spec", "resources"), "x", ('resources: spec.resources: expected an object, got "x"',)),
        (("spec", "resources"), {"limits": ["cpu"]},
         ('resources: spec.resources.limits: expected an object, got "[\'cpu\']"',)),
        (("spec", "volumes"), [{"image": "x"}, 5, {"image": {"reference": 5}}], ()),
        (("spec", "nodeSelector"), ["zone"], ('spec.nodeSelector: must map label names to values, got "[\'zone\']"',)),
        (("spec", "nodeSelector"), {"zone": 5},
         ('spec.nodeSelector: must map label names to values, got "{\'zone\': 5}"',)),
        (("spec",), 5, ('resources: spec: expected an object, got "5"',)),
        (("spec", "containers"), [{"resources": None}], ()),
        (("spec", "tolerations"), "all", ()),
        (("spec", "affinity"), "x", ()),
        (("spec", "nodeName"), 5, ()),
        (("spec", "schedulerName"), ["x"], ()),
        (("metadata", "labels"), None, ()),
        (("metadata", "labels"), [1], ()),
        (("metadata", "annotations"), [1], ()),
        (("metadata",), "x", ()),
    ],
)
def test_wrong_types_in_a_pod_become_problems_or_nothing(path, value, problems):
    assert pods.parse(planted(pod("p", cpu="1"), path, value)).problems == problems


@pytest.mark.parametrize(
    "required",
    [
        "x",
        {},  # present and empty matches no node, as upstream's selector without terms
        {"nodeSelectorTerms": "x"},
        {"nodeSelectorTerms": [5]},
        {"nodeSelectorTerms": [{"matchExpressions": [5]}]},
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": "b"}]}]},
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, None]}]},
    ],
)
def test_required_node_affinity_that_cannot_be_read_matches_no_node(required):
    obj = pod("p", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}})
    terms = pods.parse(obj).required_terms
    assert terms is not None and not any(term.matches({"zone": "a"}, "n") for term in terms)


def test_preferences_that_cannot_be_read_are_left_out():
    preference = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
    preferred = [5, {"weight": "x", "preference": preference}, {"weight": 10, "preference": 5},
                 {"weight": 10**9, "preference": preference}, {"weight": 10, "preference": preference}]
    obj = pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}})
    assert pods.parse(obj).preferred_terms == (
        (10, predicates.Term((predicates.Expression("tier", "In", ("gold",)),))),)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("status", "allocatable"), 5,
         {"problems": ('status.allocatable: expected an object, got "5"',), "ready": False}),
        (("status", "allocatable"), {"cpu": "lots", "pods": "110"},
         {"problems": ("status.allocatable cpu: 'lots' is not a quantity (like 2, 500m, 40Gi)",), "ready": False}),
        (("status", "allocatable"), {"nvidia.com/gpu": "1e12"}, {"gpu_count": MAX_GPUS, "ready": True}),
        (("status", "allocatable"), {"memory": "1e30"}, {"allocatable": {"memory": MAX_MILLI}}),
        (("metadata", "labels"), None, {"labels": {}}),
        (("metadata", "labels"), [1], {"labels": {}}),
        (("metadata", "labels"), {"gpu.nvidia.com/count": "²"}, {"gpu_count": 8}),
        (("metadata", "labels"), {"gpu.nvidia.com/memory": "²"}, {"gpu_memory_mib": None}),
        (("metadata", "annotations"), [1], {"gpu_utilization": None}),
        (("metadata", "annotations"),
         {nodes.UTILIZATION_ANNOTATION: "0.4", nodes.UTILIZATION_TIME_ANNOTATION: "2026-11-29T11:58:00"},
         {"gpu_utilization": None}),  # a time without a zone cannot be compared with now
        (("spec", "taints"), "x", {"taints": ()}),
        (("status", "images"), "x", {"images": {}}),
        (("status", "images"), [{"names": "x", "sizeBytes": 1}, {"names": ["y"], "sizeBytes": 10**30}],
         {"images": {"y": 2**63 - 1}}),
        (("status",), None, {"ready": True, "allocatable": {}}),
    ],
)
def test_wrong_types_in_a_node_are_read_safely(path, value, expected):
    obj = planted(node("n", model=None, memory_mib=None), path, value)
    parsed = nodes.parse(obj, now=datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc))
    assert {name: getattr(parsed, name) for name in expected} == expected


# --- properties ---------------------------------------------------------------------------------

DIGITS = "0123456789²³¹٣۴߀१"
hostile_text = st.one_of(
    st.text(),
    st.text(alphabet=DIGITS, max_size=30),
    st.builds(lambda text, times: text * times, st.text(alphabet=DIGITS + "[]{}:,\"|x", min_size=1, max_size=4),
              st.integers(1, 70_000)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
POD_PATHS = [
    ("spec",), ("spec", "priority"), ("spec", "containers"), ("spec", "initContainers"), ("spec", "overhead"),
    ("spec", "tolerations"), ("spec", "nodeSelector"), ("spec", "affinity"), ("spec", "nodeName"),
    ("spec", "schedulerName"), ("spec", "resources"), ("spec", "resources", "requests"), ("spec", "volumes"),
    ("metadata",), ("metadata", "labels"), ("metadata", "annotations"),
    ("metadata", "name"), ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"),
    ("spec", "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("metadata", "annotations", pods.DEVICES_ANNOTATION), ("metadata", "annotations", pods.MILLI_ANNOTATION),
    ("metadata", "annotations", pods.MODEL_ANNOTATION), ("metadata", "annotations", pods.MEMORY_ANNOTATION),
    ("spec", "affinity", "podAffinity"), ("spec", "affinity", "podAntiAffinity"),
    ("spec", "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("spec", "topologySpreadConstraints"), ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"),
]
NODE_PATHS = [
    ("status",), ("status", "allocatable"), ("status", "allocatable", "cpu"), ("status", "allocatable", "nvidia.com/gpu"),
    ("status", "capacity"), ("status", "conditions"), ("metadata", "labels"), ("metadata", "annotations"),
    ("metadata", "labels", "gpu.nvidia.com/count"), ("metadata", "labels", "gpu.nvidia.com/model"),
    ("spec", "taints"), ("spec", "unschedulable"), ("metadata", "name"), ("status", "images"),
]
ANNOTATIONS = [pods.MILLI_ANNOTATION, pods.MEMORY_ANNOTATION, pods.MODEL_ANNOTATION, pods.SPOT_ANNOTATION,
               pods.DEVICES_ANNOTATION, "example.com/other"]


def planted_all(obj: dict[str, Any], plants: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    for path, value in plants:
        obj = planted(obj, path, value)
    return obj


@settings(max_examples=200, deadline=None)
@given(annotations=st.dictionaries(st.sampled_from(ANNOTATIONS), hostile_text))
def test_any_annotation_value_becomes_bounded_facts(annotations):
    obj = pod("p", gpus=1, annotations=annotations)
    parsed = pods.parse(obj)
    # a message quotes at most 40 characters of a value, each escaped in at most 12 (a surrogate pair,
    # "\ud800\udc00"), plus its own words: bounded whatever the value's length
    assert max((len(s) for s in strings_in(parsed)), default=0) <= 40 * 12 + 200
    rules.gpu_demand(obj, ("nvidia.com/gpu",))


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(
    st.text(),
    st.from_regex(r"\A[+-]?[0-9]{1,3000}(\.[0-9]{0,3000})?([eE][+-]?[0-9]{1,18}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?\Z"),
))
def test_any_quantity_is_refused_or_capped_in_billionths(text):
    try:
        value = quantity.parse(text)
    except quantity.QuantityError:
        return
    assert abs(value) <= LARGEST and (value * 10**9).denominator == 1


@settings(max_examples=300, deadline=None)
@given(plants=st.lists(st.tuples(st.sampled_from(POD_PATHS), json_values), max_size=4))
def test_any_json_in_a_pod_parses_and_is_decided(plants):
    parsed = pods.parse(planted_all(pod("p", gpus=1, cpu="1"), plants))
    assert all(0 < amount <= MAX_MILLI for amount in parsed.requests.values())
    c = model(node("a"), node("b", gpus=0))
    framework.Framework(c).decide(parsed)
    c.restore(dataclasses.replace(parsed, node_name="a"))
    assert_consistent(c)


SELECTOR_PATHS = [("spec",), ("spec", "selector"), ("spec", "selector", "matchLabels"),
                  ("spec", "selector", "matchExpressions"), ("metadata",), ("metadata", "name")]


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(spread.SELECTING_KINDS),
       plants=st.lists(st.tuples(st.sampled_from(SELECTOR_PATHS), json_values), max_size=3))
def test_any_json_in_a_service_or_controller_is_kept_as_a_selector_or_counted_and_its_pods_are_decided(kind, plants):
    """A tenant's own Service or ReplicaSet: its selector is kept, or the object is refused and counted."""
    obj = planted_all({"metadata": {"name": "web", "namespace": "ns"}, "spec": {}}, plants)
    found = watched.WatchedCluster(scheduler_name="gpu-scheduler")
    found.nodes_relisted([node("a"), node("b")], now=NOW)
    for each in spread.SELECTING_KINDS:
        found.selectors_relisted(each, [obj] if each == kind else [], now=NOW)
    found.selector_event(kind, "MODIFIED", obj, now=NOW)
    incoming = pod("p", cpu="1", labels={"app": "web"})
    incoming["metadata"]["ownerReferences"] = [{"apiVersion": "v1" if kind == "ReplicationController" else "apps/v1",
                                                 "kind": kind, "name": "web", "controller": True}]
    framework.Framework(found.cluster).decide(found.facts_of(incoming))


@settings(max_examples=300, deadline=None)
@given(plants=st.lists(st.tuples(st.sampled_from(NODE_PATHS), json_values), max_size=4))
def test_any_json_in_a_node_parses_and_is_modelled(plants):
    parsed = nodes.parse(planted_all(node("n"), plants))
    assert 0 <= parsed.gpu_count <= MAX_GPUS
    assert all(0 <= amount <= MAX_MILLI for amount in parsed.allocatable.values())
    c = cluster.Cluster()
    c.set_node(parsed)
    framework.Framework(c).decide(facts(pod("p", gpus=1, cpu="1")))


# --- the cluster model under any sequence of bound pods -------------------------------------------

device_lists = st.lists(st.fixed_dictionaries({"index": st.integers(-1, 12)}, optional={
    "milli": st.one_of(st.integers(-1, 1200), st.booleans())}), max_size=9)
recorded_devices = st.one_of(st.none(), st.just("garbage"), device_lists.map(json.dumps))


@st.composite
def bound_pods(draw, number: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["whole", "share", "cpu"]))
    recorded = draw(recorded_devices)
    obj = pod(f"p{number}", node_name=draw(st.sampled_from(["a", "b", "c", "gone"])),
              gpus=draw(st.integers(1, 10)) if kind == "whole" else 0,
              milli=draw(st.integers(1, 999)) if kind == "share" else None,
              mem=draw(st.sampled_from(["1Gi", "100P", "1e30", "9" * 5000])),
              annotations={pods.DEVICES_ANNOTATION: recorded} if recorded is not None else None,
              namespace=draw(st.sampled_from(["ns", "other"])), labels=draw(st.sampled_from([{}, {"app": "web"}])),
              affinity=draw(st.sampled_from(POD_AFFINITIES)))
    if draw(st.booleans()):
        obj["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"  # being deleted: spread counts it no more
    return obj


POD_AFFINITIES = [None, {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}},
    {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "topology.kubernetes.io/zone"}}]}}]


operations = st.lists(st.one_of(
    st.tuples(st.just("restore"), st.integers(0, 11)),
    st.tuples(st.just("unassign"), st.integers(0, 11)),
    st.tuples(st.just("resize"), st.sampled_from(["a", "b", "c"]), st.sampled_from([0, 1, 2, 4, 8])),
    st.tuples(st.just("remove"), st.sampled_from(["a", "b", "c"])),
), max_size=40)


def assert_consistent(c: cluster.Cluster) -> None:
    for row in c.index.values():
        count = int(c.gpu_count[row])
        free = [int(f) for f in c.gpu_free[row]]
        accounted = [0] * len(free)
        keys = c.node_pods.get(row, set())
        for key in keys:
            for device in c.assignments[key].devices:
                accounted[device.index] += device.milli
        assert free[:count] == [1000 - used for used in accounted[:count]]
        assert all(0 <= f <= 1000 for f in free[:count]) and not any(free[count:]) and not any(accounted[count:])
        assert c.gpu_used[row] == sum(accounted)
        assert c.whole_free[row] == free[:count].count(1000)
        for resource, column in c.resources.items():
            exact = sum(c.assignments[key].pod.requests.get(resource, 0) for key in keys)
            assert c.used[column, row] == min(exact, MAX_MILLI)
    rebuilt = podaffinity.PodIndex()
    for assignment in c.assignments.values():
        rebuilt.add(assignment.pod.namespace, assignment.pod.labels, assignment.pod.pod_affinity, assignment.node,
                    terminating=assignment.pod.terminating)
    assert index_contents(c.pod_index) == index_contents(rebuilt)


def index_contents(index: podaffinity.PodIndex) -> tuple[Any, ...]:
    """What the pod index holds, without the order things came in."""
    groups = {(namespace, key): dict(group.rows) for namespace, by_labels in index.groups.items()
              for key, group in by_labels.items()}
    placed = [{key: dict(rows) for key, rows in kept.rows.items()} for kept in (index.scoring_terms, index.anti_terms)]
    pairs = {(namespace, pair): set(found) for namespace, by_pair in index._by_pair.items()
             for pair, found in by_pair.items()}
    return groups, *placed, pairs


@settings(max_examples=200, deadline=None)
@given(data=st.data(), steps=operations)
def test_the_model_stays_whole_under_any_bound_pods(data, steps):
    c = model(node("a", gpus=4), node("b", gpus=8), node("c", gpus=0))
    candidates = [data.draw(bound_pods(i)) for i in range(12)]
    for step in steps:
        if step[0] == "restore":
            report = c.restore(facts(candidates[step[1]]))
            assert report is None or len(report) < 500
        elif step[0] == "unassign":
            c.unassign(pods.key_of(candidates[step[1]]))
        elif step[0] == "remove":
            c.remove_node(step[1])
        else:
            c.set_node(nodes.parse(node(step[1], gpus=step[2])))
        assert_consistent(c)
    for key in list(c.assignments):
        c.unassign(key)
    assert not c.used.any() and not c.gpu_used.any()
    assert index_contents(c.pod_index) == ({}, {}, {}, {})
    assert all(list(c.gpu_free[row, : c.gpu_count[row]]) == [1000] * int(c.gpu_count[row]) for row in c.index.values())
