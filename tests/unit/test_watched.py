"""The watched cluster model both scheduler modes keep: watch events, relists and our own bindings in,
the accounting the decisions read out. Pure: objects are the API's JSON, the time is passed in.

The churn cases here each broke the two models this one replaced (run's and the extender's): pods
keyed by name, pods dropped with their node, a refused binding dropped instead of re-checked.
"""

from __future__ import annotations

import datetime
import pickle
from typing import Any

import pytest

from scheduler_core import cluster, framework, nodes, pods, watched
from tests.unit.builders import node, pod

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
LATER = NOW + watched.ASSUMED_TTL + datetime.timedelta(seconds=1)
DEVICES = "gpu-scheduler.io/gpu-devices"
COST, INITIAL = "controller.kubernetes.io/pod-deletion-cost", "gpu-scheduler.io/initial-deletion-cost"


def model(*node_objects: dict[str, Any], **kwargs: Any) -> watched.WatchedCluster:
    found = watched.WatchedCluster(scheduler_name="gpu-scheduler", **kwargs)
    found.nodes_relisted(list(node_objects), now=NOW)
    found.pods_relisted([], now=NOW)
    return found


def incarnation(name: str, uid: str, *, node_name: str | None = None, devices: str | None = None,
                annotations: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    annotations = {**(annotations or {}), **({DEVICES: devices} if devices else {})}
    obj = pod(name, node_name=node_name, annotations=annotations, **kwargs)
    obj["metadata"]["uid"] = uid
    return obj


def bound(obj: dict[str, Any], node_name: str, devices: tuple[pods.Device, ...] = ()) -> dict[str, Any]:
    """The pod as the watch shows it once a binding (with its devices annotation) landed."""
    annotations = {**obj["metadata"]["annotations"]}
    if devices:
        annotations[DEVICES] = pods.format_devices(devices)
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations},
            "spec": {**obj["spec"], "nodeName": node_name}}


def used(found: watched.WatchedCluster, name: str) -> list[int]:
    """Thousandths in use on each GPU of the node."""
    row = found.cluster.index[name]
    return [1000 - int(free) for free in found.cluster.gpu_free[row, : found.cluster.gpu_count[row]]]


def assume(found: watched.WatchedCluster, uid: str, node_name: str, *devices: pods.Device) -> None:
    found.assume(found.pending[uid].facts, node_name, tuple(devices), now=NOW)


# --- keyed by UID -----------------------------------------------------------------------------------


def test_a_refusal_of_an_old_incarnation_never_touches_a_new_pod_of_the_same_name():
    """Deleted and created again under its name while its binding is in flight: the old binding's 409
    (the UID precondition) must not clear the new pod's place. Keyed by name, it did: the model ended
    with less on the node than the API had, and the freed share was given again (1200/1000)."""
    found = model(node("a", gpus=1))
    old = incarnation("p", "uid-old", milli=600)
    found.pod_event("ADDED", old, now=NOW)
    assume(found, "uid-old", "a", pods.Device(0, 600))
    found.pod_event("DELETED", old, now=NOW)  # deleted while its binding is in flight
    new = incarnation("p", "uid-new", milli=600)
    found.pod_event("ADDED", new, now=NOW)
    assume(found, "uid-new", "a", pods.Device(0, 600))
    found.confirm("uid-old", new, now=NOW)  # the old binding was refused; the API has the new pod
    assert used(found, "a") == [600] and set(found.assumed) == {"uid-new"}
    found.pod_event("MODIFIED", bound(new, "a", (pods.Device(0, 600),)), now=NOW)
    assert used(found, "a") == [600] and found.assumed == {}
    other = incarnation("q", "uid-q", milli=600)
    found.pod_event("ADDED", other, now=NOW)
    with pytest.raises(cluster.OvercommitError):  # the 600 is still taken: no share lands on top of it
        assume(found, "uid-q", "a", pods.Device(0, 600))


def test_a_late_deletion_of_an_old_incarnation_leaves_the_new_one_accounted():
    found = model(node("a", gpus=2))
    old = incarnation("p", "uid-old", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    found.pod_event("ADDED", old, now=NOW)
    new = incarnation("p", "uid-new", gpus=1, node_name="a", devices='[{"index":1,"milli":1000}]')
    found.pod_event("ADDED", new, now=NOW)
    found.pod_event("DELETED", old, now=NOW)
    assert used(found, "a") == [0, 1000]
    assert [a.pod.uid for a in found.cluster.assignments.values()] == ["uid-new"]


# --- nodes that go and come back ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["events", "relists"])
def test_a_node_deleted_and_registered_again_gets_its_pods_back(how):
    """Dropped with their node and never taken back, its pods' GPUs looked free when it returned:
    16 whole GPUs were bound on 8, and GPU 0 given to two pods."""
    a = node("a", gpus=2)
    found = model(a, node("b", gpus=2))
    held = [incarnation(f"p{i}", f"uid-{i}", gpus=1, node_name="a", devices=f'[{{"index":{i},"milli":1000}}]')
            for i in range(2)]
    found.pods_relisted(held, now=NOW)
    if how == "events":
        found.node_event("DELETED", a, now=NOW)
    else:
        found.nodes_relisted([node("b", gpus=2)], now=NOW)
    assert "a" not in found.cluster.index and set(found.orphans) == {"uid-0", "uid-1"}
    if how == "events":
        change = found.node_event("ADDED", a, now=NOW)
    else:
        change = found.nodes_relisted([a, node("b", gpus=2)], now=NOW)
    assert change.freed and found.orphans == {}
    assert used(found, "a") == [1000, 1000]
    assert {a.devices for a in found.cluster.assignments.values()} == {(pods.Device(0, 1000),),
                                                                       (pods.Device(1, 1000),)}


def test_an_assumed_pod_whose_node_goes_keeps_its_devices_for_when_it_returns():
    a = node("a", gpus=2)
    found = model(a)
    found.pod_event("ADDED", incarnation("p", "uid-p", gpus=1), now=NOW)
    assume(found, "uid-p", "a", pods.Device(1, 1000))
    found.node_event("DELETED", a, now=NOW)
    found.node_event("ADDED", a, now=NOW)
    assert used(found, "a") == [0, 1000] and set(found.assumed) == {"uid-p"}


def test_a_pod_bound_to_a_node_not_seen_yet_is_accounted_when_the_node_arrives():
    found = model()
    found.pod_event("ADDED", incarnation("early", "uid-e", gpus=2, node_name="late"), now=NOW)
    assert found.cluster.assignments == {} and set(found.orphans) == {"uid-e"}
    found.node_event("ADDED", node("late", gpus=2), now=NOW)
    assert used(found, "late") == [1000, 1000] and found.orphans == {}


def test_orphans_the_api_no_longer_has_are_forgotten():
    found = model()
    early = incarnation("early", "uid-e", gpus=2, node_name="late")
    found.pod_event("ADDED", early, now=NOW)
    found.pod_event("DELETED", early, now=NOW)
    found.node_event("ADDED", node("late", gpus=2), now=NOW)
    assert used(found, "late") == [0, 0]


# --- our bindings ---------------------------------------------------------------------------------


def test_an_assumed_pod_is_accounted_at_once_and_a_stale_unbound_event_changes_nothing():
    found = model(node("a", gpus=1))
    obj = incarnation("p", "uid-p", gpus=1)
    assert found.pod_event("ADDED", obj, now=NOW).queued == {"uid-p": 0}
    assume(found, "uid-p", "a", pods.Device(0, 1000))
    assert found.pending == {} and used(found, "a") == [1000]
    change = found.pod_event("MODIFIED", obj, now=NOW)  # from before the binding
    assert change == watched.Change() and found.pending == {} and used(found, "a") == [1000]
    change = found.pod_event("MODIFIED", bound(obj, "a", (pods.Device(0, 1000),)), now=NOW)
    assert found.assumed == {} and used(found, "a") == [1000]


@pytest.mark.parametrize(("api_says", "pending", "on"), [
    ("bound-elsewhere", False, {"b": [1000], "a": [0]}),
    ("still-pending", True, {"a": [0], "b": [0]}),
    ("not-found", False, {"a": [0], "b": [0]}),
    ("another-uid", False, {"a": [0], "b": [0]}),
])
def test_after_a_failed_binding_the_model_follows_what_the_api_says(api_says, pending, on):
    found = model(node("a", gpus=1), node("b", gpus=1))
    obj = incarnation("p", "uid-p", gpus=1)
    found.pod_event("ADDED", obj, now=NOW)
    assume(found, "uid-p", "a", pods.Device(0, 1000))
    found.forget("uid-p")
    seen = {"bound-elsewhere": bound(obj, "b"), "still-pending": obj, "not-found": None,
            "another-uid": incarnation("p", "uid-other", gpus=1)}[api_says]
    change = found.confirm("uid-p", seen, now=NOW)
    assert ("uid-p" in found.pending) is pending and ("uid-p" in change.queued) is pending
    assert {name: used(found, name) for name in ("a", "b")} == on
    assert found.assumed == {}


def test_forget_leaves_a_pod_the_watch_has_shown_bound():
    """The watch can confirm a binding before its reply arrives; a late failure must not undo the API's word."""
    found = model(node("a", gpus=1))
    obj = incarnation("p", "uid-p", gpus=1)
    found.pod_event("ADDED", obj, now=NOW)
    assume(found, "uid-p", "a", pods.Device(0, 1000))
    found.pod_event("MODIFIED", bound(obj, "a", (pods.Device(0, 1000),)), now=NOW)
    assert found.forget("uid-p") == watched.Change() and used(found, "a") == [1000]


# --- relists --------------------------------------------------------------------------------------


def test_a_relist_forgets_by_uid_every_pod_it_does_not_hold():
    found = model(node("a", gpus=2))
    gone = incarnation("gone", "uid-gone", gpus=1, node_name="a")
    waiting = incarnation("waiting", "uid-w", gpus=1)
    orphan = incarnation("orphan", "uid-o", gpus=1, node_name="nowhere")
    kept = incarnation("kept", "uid-k", gpus=1, node_name="a")
    found.pods_relisted([gone, waiting, orphan, kept], now=NOW)
    change = found.pods_relisted([kept], now=NOW)
    assert change.settled == {"uid-w"} and change.freed
    assert set(found.cluster.assignments) == {"uid-k"} and found.pending == {} and found.orphans == {}


def test_a_relist_keeps_an_assumption_whose_binding_is_in_flight_or_just_done():
    found = model(node("a", gpus=2))
    in_flight, done = incarnation("flying", "uid-f", gpus=1), incarnation("done", "uid-d", gpus=1)
    found.pods_relisted([in_flight, done], now=NOW)
    assume(found, "uid-f", "a", pods.Device(0, 1000))
    assume(found, "uid-d", "a", pods.Device(1, 1000))
    found.finish_binding("uid-d", now=NOW)
    found.pods_relisted([in_flight, done], now=NOW)  # read before the bindings landed
    found.pods_relisted([done], now=NOW)  # nor is a pod whose binding is in flight dropped for its absence
    assert set(found.assumed) == {"uid-f", "uid-d"} and used(found, "a") == [1000, 1000]


def test_a_relist_long_after_the_binding_that_still_shows_the_pod_unbound_is_believed():
    found = model(node("a", gpus=1))
    obj = incarnation("p", "uid-p", gpus=1)
    found.pods_relisted([obj], now=NOW)
    assume(found, "uid-p", "a", pods.Device(0, 1000))
    found.finish_binding("uid-p", now=NOW)
    change = found.pods_relisted([obj], now=LATER)
    assert change.queued == {"uid-p": 0} and found.assumed == {} and used(found, "a") == [0]


def test_a_relist_forgets_an_assumed_pod_that_is_gone_once_its_binding_went_through():
    found = model(node("a", gpus=1))
    found.pods_relisted([incarnation("p", "uid-p", gpus=1)], now=NOW)
    assume(found, "uid-p", "a", pods.Device(0, 1000))
    found.finish_binding("uid-p", now=NOW)
    found.pods_relisted([], now=NOW)
    assert found.assumed == {} and used(found, "a") == [0]


# --- what is kept, and what is refused -------------------------------------------------------------


def test_pending_pods_and_warm_up_candidates_keep_a_few_fields_not_the_pod():
    huge = "x" * 250 * 1024
    found = model(node("a"), warm_up=True)
    waiting = incarnation("waiting", "uid-w", gpus=1, annotations={"tenant/notes": huge})
    running = incarnation("running", "uid-r", gpus=1, node_name="a",
                          annotations={"tenant/notes": huge, COST: "-50", INITIAL: "-50"})
    found.pods_relisted([waiting, running], now=NOW)
    assert found.pending["uid-w"].key == "ns/waiting" and found.warm["uid-r"].initial_cost == "-50"
    for kept in (found.pending, found.warm, found.cluster.assignments):
        assert len(pickle.dumps(kept)) < 4096


def choke_on(monkeypatch: pytest.MonkeyPatch, name: str, parser: Any = pods) -> None:
    """`parser.parse` raises for the object called `name`, as a parser may on an object it did not foresee."""
    parse = parser.parse

    def choking(obj: Any, **kwargs: Any) -> Any:
        if obj["metadata"]["name"] == name:
            raise ValueError("invalid literal for int() with base 10: 'high'")
        return parse(obj, **kwargs)

    monkeypatch.setattr(parser, "parse", choking)


def test_an_object_the_parsers_choke_on_is_counted_and_the_rest_is_taken(monkeypatch, caplog):
    choke_on(monkeypatch, "bad")
    choke_on(monkeypatch, "broken", nodes)
    found = model(node("a", gpus=2))
    found.pods_relisted([incarnation("bad", "uid-b", gpus=1, node_name="a"),
                         incarnation("good", "uid-g", gpus=1, node_name="a")], now=NOW)
    found.pod_event("MODIFIED", incarnation("bad", "uid-b", gpus=1), now=NOW)
    found.node_event("ADDED", node("broken"), now=NOW)
    assert found.rejected == {"Pod": 2, "Node": 1}
    assert set(found.cluster.assignments) == {"uid-g"}
    assert "Pod ns/bad not taken into the model: ValueError: invalid literal" in caplog.text
    assert "Node broken not taken into the model: ValueError" in caplog.text


def test_a_relist_with_unreadable_items_takes_the_rest_and_forgets_no_pod_it_lists(monkeypatch):
    found = model(node("a", gpus=2))
    first = incarnation("first", "uid-1", gpus=1)
    second = incarnation("second", "uid-2", gpus=1, node_name="a")
    found.pods_relisted([first, second], now=NOW)
    choke_on(monkeypatch, "first")
    relabelled = incarnation("first", "uid-1", gpus=1, labels={"tier": "new"})  # pending: parsed again
    found.pods_relisted(["not an object", {"metadata": ["nor this"]}, relabelled, second], now=NOW)
    assert found.rejected == {"Pod": 3} and "uid-1" in found.pending and used(found, "a") == [1000, 0]


def test_a_status_update_or_a_relabelling_of_a_placed_pod_is_not_parsed_again(monkeypatch):
    """Every binding and every status write of a placed pod comes back as a watch event, and the apiserver adds
    the node's topology labels at binding: parsing each again was a sixth of the loop's time. Only what could
    change the model (node, labels, deletion) is read, and new labels are counted without a parse."""
    found = model(node("a", gpus=2), warm_up=True)
    placed = incarnation("p", "uid-p", gpus=1, node_name="a", labels={"app": "web"})
    found.pod_event("ADDED", placed, now=NOW)
    choke_on(monkeypatch, "p")
    running = {**placed, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert found.pod_event("MODIFIED", running, now=NOW) == watched.Change()
    assert found.rejected == {} and used(found, "a") == [1000, 0]
    relabelled = incarnation("p", "uid-p", gpus=1, node_name="a",
                             labels={"app": "db", "topology.kubernetes.io/zone": "z1"})
    assert found.pod_event("MODIFIED", relabelled, now=NOW) == watched.Change(freed=True)
    placed_facts = found.cluster.assignments["uid-p"].pod
    assert found.rejected == {} and used(found, "a") == [1000, 0]
    assert placed_facts.labels == {"app": "db", "topology.kubernetes.io/zone": "z1"} and placed_facts.app == "db"
    assert [(dict(group.labels), dict(group.rows)) for group in found.cluster.pod_index.groups["ns"].values()] == [
        ({"app": "db", "topology.kubernetes.io/zone": "z1"}, {0: 1})]


def test_recorded_devices_that_do_not_match_the_request_are_logged_with_what_was_used(caplog):
    found = model(node("a", gpus=2))
    found.pod_event("ADDED", incarnation("p", "uid-p", gpus=1, node_name="a",
                                         devices='[{"index":0,"milli":1000},{"index":1,"milli":1000}]'), now=NOW)
    assert used(found, "a") == [1000, 0]
    assert "pod ns/p on node a: annotation gpu-scheduler.io/gpu-devices" in caplog.text


def test_a_devices_conflict_is_handed_to_the_driver_once_per_pod_and_message():
    """`run` writes each as a GPUDevicesConflict event on the pod; a relist must not repeat it."""
    found = model(node("a", gpus=2))
    forged = incarnation("p", "uid-p", milli=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    found.pod_event("ADDED", forged, now=NOW)
    [(facts, message)] = found.take_conflicts()
    assert facts.uid == "uid-p" and "disagrees with the pod's request" in message
    assert used(found, "a") == [1, 0]  # its own request, not the claim
    found.pods_relisted([forged], now=NOW)
    assert found.take_conflicts() == []
    found.pod_event("DELETED", forged, now=NOW)
    found.pod_event("ADDED", forged, now=NOW)  # gone and back: a new story, told again
    assert len(found.take_conflicts()) == 1


def test_the_model_reports_what_it_holds_per_node():
    found = model(node("a", gpus=2), node("cpu-only", gpus=0))
    found.pod_event("ADDED", incarnation("s", "uid-s", milli=250, node_name="a"), now=NOW)
    assert found.gpu_use() == [("a", "NVIDIA-A100-SXM4-40GB", 0.25, 2)]


def test_after_a_restart_a_devices_annotation_edited_after_binding_loses_to_the_pod_a_binding_gave_the_gpu():
    """The relist of a restarted scheduler may show the editor first; a Binding records no managed fields, so
    an annotation someone owns in managedFields was written afterwards, and is taken last."""
    victim = incarnation("victim", "uid-v", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    forger = incarnation("a-forger", "uid-f", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    forger["metadata"]["managedFields"] = [{"manager": "kubectl-patch", "operation": "Update", "fieldsType": "FieldsV1",
                                           "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{DEVICES}": {}}}}}]
    found = model(node("a", gpus=2))
    found.pods_relisted([forger, victim], now=NOW)
    assert found.cluster.assignments["uid-v"].devices == (pods.Device(0, 1000),)
    assert found.cluster.assignments["uid-f"].devices == (pods.Device(1, 1000),)
    [(facts, message)] = found.take_conflicts()
    assert facts.uid == "uid-f" and "using GPU 1" in message
    forger["metadata"]["managedFields"] = "not a list"  # a shape nobody writes: taken last, never an error
    assert model(node("a", gpus=2)).pods_relisted([forger, victim], now=NOW).freed


def recorded(obj: dict[str, Any], devices: str) -> dict[str, Any]:
    """The pod once the binder recorded `devices` in its status (pods/status, which tenants cannot write)."""
    condition = {"type": pods.DEVICES_CONDITION, "status": "True", "reason": "Bound", "message": devices}
    return {**obj, "status": {**obj.get("status", {}), "conditions": [condition]}}


def test_after_a_restart_the_binders_record_wins_over_an_edited_annotation_for_both_pods():
    """A tenant's pod rewrites its annotation onto the victim's GPU: the victim keeps its GPU, and the tenant
    is accounted on the GPU it really holds (not the first free one, which a new pod may then take)."""
    victim = recorded(incarnation("victim", "uid-v", gpus=1, node_name="a", devices='[{"index":1,"milli":1000}]'),
                      '[{"index":1,"milli":1000}]')
    forger = recorded(incarnation("a-forger", "uid-f", gpus=1, node_name="a", devices='[{"index":1,"milli":1000}]'),
                      '[{"index":2,"milli":1000}]')
    for order in ([forger, victim], [victim, forger]):
        found = model(node("a", gpus=4))
        found.pods_relisted(order, now=NOW)
        assert used(found, "a") == [0, 1000, 1000, 0]
        [(facts, message)] = found.take_conflicts()
        assert facts.uid == "uid-f" and message == (
            'annotation gpu-scheduler.io/gpu-devices "[{\\"index\\":1,\\"milli\\":1000}]" differs from the devices '
            "recorded at binding (condition gpu-scheduler.io/GPUDevices); keeping GPU 2")


def test_a_record_is_trusted_before_an_annotation_only_a_binding_wrote():
    """Restoring in list order, a pod bound before records existed could take a recorded pod's GPU."""
    old = incarnation("a-old", "uid-o", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    new = recorded(incarnation("new", "uid-n", gpus=1, node_name="a"), '[{"index":0,"milli":1000}]')
    found = model(node("a", gpus=2))
    found.pods_relisted([old, new], now=NOW)
    assert found.cluster.assignments["uid-n"].devices == (pods.Device(0, 1000),)
    assert found.cluster.assignments["uid-o"].devices == (pods.Device(1, 1000),)


@pytest.mark.parametrize("condition", [
    {"type": pods.DEVICES_CONDITION, "status": "False", "message": '[{"index":1,"milli":1000}]'},
    {"type": pods.DEVICES_CONDITION, "status": "True", "message": "not devices"},
    {"type": "Ready", "status": "True", "message": '[{"index":1,"milli":1000}]'},
    "not a condition",
])
def test_what_is_no_record_leaves_the_annotation_in_charge(condition):
    obj = incarnation("p", "uid-p", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    obj["status"] = {"conditions": [condition]}
    facts = pods.parse(obj)
    assert facts.devices == (pods.Device(0, 1000),) and facts.devices_from == f"annotation {DEVICES}"
    assert pods.recorded_devices(obj) is None


def test_an_annotation_edited_while_its_node_is_away_moves_nothing_when_the_node_returns():
    found = model(node("a", gpus=2))
    mine = incarnation("p", "uid-p", gpus=1, node_name="a", devices='[{"index":1,"milli":1000}]')
    found.pod_event("ADDED", mine, now=NOW)
    found.node_event("DELETED", node("a", gpus=2), now=NOW)
    edited = incarnation("p", "uid-p", gpus=1, node_name="a", devices='[{"index":0,"milli":1000}]')
    found.pod_event("MODIFIED", edited, now=NOW)
    found.node_event("ADDED", node("a", gpus=2), now=NOW)
    assert used(found, "a") == [0, 1000]


def test_a_node_that_only_lists_other_images_makes_no_room():
    """Images only score (ImageLocality): pods that fit nowhere need not be tried again for them."""
    found = model(node("a"))
    pulled = node("a")
    pulled["status"]["images"] = [{"names": ["registry.example/train:v2"], "sizeBytes": 5 * 2**30}]
    assert not found.node_event("MODIFIED", pulled, now=NOW).freed
    assert found.cluster.images == {"registry.example/train:v2": {found.cluster.index["a"]: 5 * 2**30}}


# --- inter-pod affinity: what the model keeps of placed pods and namespaces ----------------------------------

SPREAD = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
TEAM_SELECTOR = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {"matchLabels": {"team": "a"}},
     "topologyKey": "topology.kubernetes.io/zone"}]}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def replica(index: int, **kwargs: Any) -> dict[str, Any]:
    return incarnation(f"web-{index}", f"uid-{index}", cpu="1", labels={"app": "web"}, affinity=SPREAD, **kwargs)


def assumed_in_turn(found: watched.WatchedCluster, uids: list[str]) -> list[str]:
    """Decide and assume each pending pod in turn, as `run` does before any binding lands; the nodes chosen."""
    scheduler = framework.Framework(found.cluster)
    chosen = []
    for uid in uids:
        decision = scheduler.decide(found.pending[uid].facts)
        assert decision.node is not None
        found.assume(found.pending[uid].facts, decision.node, decision.devices, now=NOW)
        chosen.append(decision.node)
    return chosen


def test_assumed_replicas_count_so_a_burst_with_anti_affinity_spreads():
    """Nothing is bound yet: each replica's anti-affinity sees the replicas assumed before it."""
    found = model(node("a"), node("b"), node("c"))
    found.pods_relisted([replica(i) for i in range(4)], now=NOW)
    assert sorted(assumed_in_turn(found, [f"uid-{i}" for i in range(3)])) == ["a", "b", "c"]
    assert framework.Framework(found.cluster).decide(found.pending["uid-3"].facts).reason == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")


def test_a_pod_that_goes_takes_its_terms_out_of_the_index():
    found = model(node("a"), node("b"))
    found.pods_relisted([replica(0, node_name="a"), replica(1, node_name="b")], now=NOW)
    index = found.cluster.pod_index
    assert sum(sum(rows.values()) for rows in index.anti_terms.rows.values()) == 2
    assert framework.Framework(found.cluster).decide(pods.parse(replica(2))).node is None
    found.pod_event("DELETED", replica(0, node_name="a"), now=NOW)
    assert [dict(rows) for rows in index.anti_terms.rows.values()] == [{found.cluster.index["b"]: 1}]
    assert framework.Framework(found.cluster).decide(pods.parse(replica(2))).node == "a"
    found.pod_event("DELETED", replica(1, node_name="b"), now=NOW)
    assert index.anti_terms.rows == {} and index.scoring_terms.rows == {} and index.groups == {}


def test_a_forgotten_assumption_and_a_deleted_node_take_their_pods_out_of_the_index():
    found = model(node("a"), node("b"))
    found.pods_relisted([replica(0), replica(1, node_name="b")], now=NOW)
    found.assume(found.pending["uid-0"].facts, "a", (), now=NOW)
    found.forget("uid-0")
    found.node_event("DELETED", node("b"), now=NOW)
    index = found.cluster.pod_index
    assert index.anti_terms.rows == {} and index.groups == {}
    found.node_event("ADDED", node("b"), now=NOW)  # the orphan is accounted again with its node
    assert list(index.anti_terms.rows.values()) == [{found.cluster.index["b"]: 1}]


def test_a_pod_whose_terms_select_namespaces_by_label_waits_for_the_namespaces():
    found = model(node("a"), node("b", zone="zone-b"))
    db = incarnation("db", "uid-db", node_name="b", namespace="data", labels={"app": "db"})
    found.pods_relisted([db, incarnation("app", "uid-app", affinity=TEAM_SELECTOR)], now=NOW)
    scheduler = framework.Framework(found.cluster)
    waiting = found.pending["uid-app"].facts
    assert scheduler.decide(waiting).reason == (
        "0/2 nodes are available: 2 node(s) not checked against pod affinity: namespaces not listed yet "
        "(namespaceSelector).")
    assert found.namespaces_relisted([namespace("data", team="b"), namespace("ns")], now=NOW).freed
    assert scheduler.decide(waiting).reason == "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    assert not found.namespace_event("MODIFIED", namespace("ns"), now=NOW).freed  # nothing changed
    assert found.namespace_event("MODIFIED", namespace("data", team="a"), now=NOW).freed
    assert scheduler.decide(waiting).node == "b"
    assert found.namespace_event("DELETED", namespace("data", team="a"), now=NOW).freed
    assert scheduler.decide(waiting).node is None


def test_a_namespace_event_before_the_first_list_makes_nothing_known():
    found = model(node("a"))
    assert not found.namespace_event("ADDED", namespace("data", team="a"), now=NOW).freed
    assert found.cluster.namespace_labels is None
    assert not found.namespace_event("ADDED", {"metadata": None}, now=NOW).freed
    found.namespaces_relisted([namespace("data"), {"kind": "Namespace"}], now=NOW)
    assert found.cluster.namespace_labels == {"data": {}} and found.rejected["Namespace"] == 2


def test_a_pod_bound_elsewhere_wakes_pods_waiting_for_pod_affinity():
    """Without required pod affinity pending, a pod that comes makes no room; with it, it may be the one awaited."""
    found = model(node("a"))
    assert not found.pod_event("ADDED", incarnation("db", "uid-db", node_name="a"), now=NOW).freed
    found.pod_event("ADDED", incarnation("app", "uid-app", affinity=TEAM_SELECTOR), now=NOW)
    assert found.pod_event("ADDED", incarnation("db2", "uid-db2", node_name="a"), now=NOW).freed
    found.pod_event("DELETED", incarnation("app", "uid-app", affinity=TEAM_SELECTOR), now=NOW)
    assert not found.pod_event("ADDED", incarnation("db3", "uid-db3", node_name="a"), now=NOW).freed


def test_our_own_binding_confirmed_wakes_pods_waiting_for_pod_affinity():
    """The pod awaited may be one this scheduler bound: when the watch shows it bound, parked pods are tried again
    (once: later updates of it make no room)."""
    found = model(node("a"))
    found.pod_event("ADDED", incarnation("app", "uid-app", affinity=TEAM_SELECTOR), now=NOW)
    found.pod_event("ADDED", incarnation("db", "uid-db"), now=NOW)
    found.assume(found.pending["uid-db"].facts, "a", (), now=NOW)
    bound = incarnation("db", "uid-db", node_name="a")
    assert found.pod_event("MODIFIED", bound, now=NOW).freed
    assert not found.pod_event("MODIFIED", bound, now=NOW).freed


# --- topology spread: the counts follow the pods ------------------------------------------------------------

ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}


def spread(name: str, uid: str, *constraints: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    obj = incarnation(name, uid, cpu="1", labels={"app": "web"}, **kwargs)
    obj["spec"]["topologySpreadConstraints"] = list(constraints or (ZONE_SPREAD,))
    return obj


def test_assumed_replicas_count_so_a_burst_with_a_spread_constraint_spreads():
    """Nothing is bound yet: each replica's constraint counts the replicas assumed before it."""
    found = model(node("a1", zone="z1"), node("a2", zone="z1"), node("b", zone="z2"))
    found.pods_relisted([spread(f"web-{i}", f"uid-{i}") for i in range(6)], now=NOW)
    chosen = assumed_in_turn(found, [f"uid-{i}" for i in range(6)])
    zones = [found.cluster.node(found.cluster.index[name]).zone for name in chosen]
    assert sorted(zones) == ["z1", "z1", "z1", "z2", "z2", "z2"] and found.assumed.keys() == {
        f"uid-{i}" for i in range(6)}


def test_pods_that_go_are_being_deleted_or_change_their_labels_leave_the_counts():
    """The pod may go to a only while a holds no more matching pods than b: a deletion, a deletion begun and a
    label taken away each change that, and each may make room."""
    pinned = {**ZONE_SPREAD, "topologyKey": "kubernetes.io/hostname", "nodeAffinityPolicy": "Ignore"}
    found = model(node("a"), node("b"))
    on_a = [spread(f"a-{i}", f"uid-a{i}", node_name="a") for i in range(2)]
    on_b = spread("b-0", "uid-b0", node_name="b")
    found.pods_relisted([*on_a, on_b, spread("p", "uid-p", pinned, node_selector={"kubernetes.io/hostname": "a"})],
                        now=NOW)
    scheduler = framework.Framework(found.cluster)

    def decide() -> str | None:
        return scheduler.decide(found.pending["uid-p"].facts).node

    assert decide() is None  # a: 2 + 1 - 1 > 1
    assert found.pod_event("DELETED", on_a[0], now=NOW).freed
    assert decide() == "a"  # a: 1 + 1 - 1
    deleting = {**on_b, "metadata": {**on_b["metadata"], "deletionTimestamp": "2026-11-29T12:00:00Z"}}
    assert found.pod_event("MODIFIED", deleting, now=NOW).freed
    assert decide() is None  # b counts 0 now: a: 1 + 1 - 0 > 1
    relabelled = {**on_a[1], "metadata": {**on_a[1]["metadata"], "labels": {"app": "old"}}}
    assert found.pod_event("MODIFIED", relabelled, now=NOW).freed
    assert decide() == "a"
    assert not found.pod_event("MODIFIED", relabelled, now=NOW).freed  # nothing changed
    groups = found.cluster.pod_index.groups["ns"].values()
    assert sorted((dict(g.labels)["app"], g.terminating, sum(g.rows.values())) for g in groups) == [
        ("old", False, 1), ("web", True, 1)]


def test_a_pod_bound_elsewhere_wakes_pods_waiting_for_topology_spread():
    """A pod landing in the emptiest domain may raise the lowest count and let a waiting pod through."""
    found = model(node("a"))
    assert not found.pod_event("ADDED", incarnation("db", "uid-db", node_name="a"), now=NOW).freed
    found.pod_event("ADDED", spread("p", "uid-p"), now=NOW)
    assert found.pod_event("ADDED", incarnation("db2", "uid-db2", node_name="a"), now=NOW).freed


# --- system default spreading: the selectors of Services and controllers ---------------------------------------


def selecting(kind: str, name: str, selector: dict[str, Any] | None, *, namespace: str = "ns") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector}}


def default_selector(found: watched.WatchedCluster, obj: dict[str, Any]) -> str | None:
    """The pod's default selector as `k=v` requirements (None: not known yet)."""
    facts = found.facts_of(obj)
    selector = found.cluster.default_selectors.selector_for(facts.namespace, facts.labels, facts.controller)
    return None if selector is None else ",".join(f"{r.key}={'|'.join(r.values)}" for r in selector)


WEB = incarnation("web-0", "uid-web", labels={"tier": "web", "pod-template-hash": "7d9"})
WEB["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u",
                                       "controller": True}]
WEB_SET = selecting("ReplicaSet", "web-7d9", {"matchLabels": {"pod-template-hash": "7d9"}})


def test_the_selectors_follow_adds_updates_deletions_and_relists_and_queue_nothing():
    found = model(node("a"))
    assert found.selectors_relisted("Service", [selecting("Service", "front", {"tier": "web"}),
                                                selecting("Service", "away", {"tier": "web"}, namespace="other")],
                                    now=NOW) == watched.Change()
    assert default_selector(found, WEB) is None  # its ReplicaSet's kind has not been listed
    assert default_selector(found, incarnation("bare", "uid-bare", labels={"tier": "web"})) == "tier=web"
    found.selectors_relisted("ReplicaSet", [WEB_SET], now=NOW)
    assert default_selector(found, WEB) == "tier=web,pod-template-hash=7d9"
    version = found.cluster.default_selectors.version
    assert found.selector_event("ReplicaSet", "MODIFIED", {**WEB_SET, "status": {"replicas": 3}},
                                now=NOW) == watched.Change()
    assert found.cluster.default_selectors.version == version  # a status update: nothing cached is stale
    found.selector_event("Service", "MODIFIED", selecting("Service", "front", {"tier": "web", "zone": "x"}), now=NOW)
    assert default_selector(found, WEB) == "pod-template-hash=7d9"  # the Service no longer selects the pod
    found.selector_event("ReplicaSet", "DELETED", WEB_SET, now=NOW)
    assert default_selector(found, WEB) == ""
    found.selector_event("ReplicaSet", "ADDED", WEB_SET, now=NOW)
    assert default_selector(found, WEB) == "pod-template-hash=7d9"
    found.selectors_relisted("ReplicaSet", [], now=NOW)  # a relist is the truth: what it lacks is gone
    found.selectors_relisted("Service", [], now=NOW)
    assert default_selector(found, WEB) == "" and found.cluster.default_selectors.selectors == {
        kind: {} for kind in ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")}


def test_a_selector_object_the_model_cannot_read_is_counted_and_the_rest_is_taken():
    found = model(node("a"))
    found.selectors_relisted("ReplicaSet", [{"kind": "ReplicaSet", "metadata": {"namespace": "ns"}}, WEB_SET], now=NOW)
    assert found.selector_event("ReplicaSet", "ADDED", {"metadata": None}, now=NOW) == watched.Change()
    found.selectors_relisted("Service", [], now=NOW)
    assert found.rejected["ReplicaSet"] == 2 and default_selector(found, WEB) == "pod-template-hash=7d9"


def test_a_pod_of_a_replica_set_is_spread_by_default_as_its_replicas_are_assumed():
    """Nothing is bound yet: each replica's default constraints count the replicas assumed before it."""
    found = model(node("a", gpus=0), node("b", gpus=0), node("c", gpus=0))
    for kind in ("Service", "ReplicationController", "StatefulSet"):
        found.selectors_relisted(kind, [], now=NOW)
    found.selectors_relisted("ReplicaSet", [WEB_SET], now=NOW)
    found.pods_relisted([{**WEB, "metadata": {**WEB["metadata"], "name": f"web-{i}", "uid": f"uid-{i}"}}
                         for i in range(6)], now=NOW)
    assert sorted(assumed_in_turn(found, [f"uid-{i}" for i in range(6)])) == ["a", "a", "b", "b", "c", "c"]


def test_preemption_reads_of_a_placed_pod_its_start_and_its_deletion_by_a_preemption_from_status_updates():
    found = model(node("a", gpus=1))
    placed = bound(incarnation("victim", "uid-v", gpus=1), "a")
    found.pod_event("ADDED", placed, now=NOW)
    started = {**placed, "status": {"startTime": "2026-11-29T11:00:00Z"}}
    found.pod_event("MODIFIED", started, now=NOW)
    assert found.cluster.assignments["uid-v"].pod.started == "2026-11-29T11:00:00Z"
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    deleting = {**started, "metadata": {**started["metadata"], "deletionTimestamp": "2026-11-29T12:00:00Z"},
                "status": {**started["status"], "conditions": [condition]}}
    found.pod_event("MODIFIED", deleting, now=NOW)
    victim = found.cluster.assignments["uid-v"].pod
    assert victim.preempted and victim.terminating and victim.started == "2026-11-29T11:00:00Z"


def test_budgets_and_nominations_are_kept_from_the_watches():
    found = model(node("a", gpus=1))
    budget = {"metadata": {"name": "b", "namespace": "ns", "uid": "uid-b"},
              "spec": {"selector": {"matchLabels": {"app": "x"}}}, "status": {"disruptionsAllowed": 0}}
    found.budgets_relisted([budget], now=NOW)
    assert found.budgets["uid-b"].allowed == 0
    found.budget_event("MODIFIED", {**budget, "status": {"disruptionsAllowed": 2}}, now=NOW)
    assert found.budgets["uid-b"].allowed == 2
    found.budget_event("DELETED", budget, now=NOW)
    assert not found.budgets

    waiting = incarnation("urgent", "uid-u", gpus=1)
    found.pod_event("ADDED", {**waiting, "status": {"nominatedNodeName": "a"}}, now=NOW)  # after a restart
    assert [(facts.key, node_name) for facts, node_name in found.nominees()] == [("ns/urgent", "a")]
    found.pod_event("MODIFIED", waiting, now=NOW)  # a view older than the nomination clears nothing
    assert found.nominated == {"uid-u": "a"}
    found.pod_event("DELETED", waiting, now=NOW)
    assert found.nominees() == [] and not found.nominated
