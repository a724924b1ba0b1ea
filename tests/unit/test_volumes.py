"""The volume plugins beyond upstream's tables (test_upstream_volumes.py): what our decisions assume of storage,
what PreBind writes and waits for, the simulator's storage input, and a bad storage object in a watch."""

from __future__ import annotations

import datetime
from typing import Any

import yaml

from scheduler_core import profile, volumes, watched
from tests.commands import gpu_scheduler
from tests.unit.builders import facts, node, pod, scheduler

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
WFFC = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}


def claim(name: str, *, size: str = "10Gi", storage_class: str = "zonal", volume: str | None = None,
          version: str = "1", **annotations: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": spec,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version,
                         "annotations": annotations}}


def volume(name: str, *, zone: str, size: str = "10Gi", version: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "resourceVersion": version},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "zonal",
                     "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": name},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}},
            "status": {"phase": "Available"}}


def user(name: str, *claims: str) -> dict[str, Any]:
    obj = pod(name, gpus=1)
    obj["spec"]["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                              for i, c in enumerate(claims)]
    return obj


def with_storage(framework: Any, *objects: dict[str, Any]) -> Any:
    storage = framework.cluster.storage
    for kind in volumes.KINDS:
        storage.clear(kind)
    for obj in objects:
        storage.set(obj["kind"], obj)
    return framework


def test_a_chosen_volume_is_taken_at_once_so_the_next_claim_gets_another():
    # without zone-balance, which would send the second pod to the idler zone-b whatever the volumes
    unbalanced = profile.Scheduling(weights=(("zone-balance", 0),))
    framework = with_storage(scheduler(node("a", zone="zone-a"), node("b", zone="zone-b"), scheduling=unbalanced),
                             WFFC, claim("one"), claim("two"), volume("pv-a", zone="zone-a"))
    first = framework.place(facts(user("first", "one")))
    assert (first.node, first.volume_plan.bindings) == ("a", ((("ns", "one"), "pv-a"),))
    framework.cluster.storage.assume(first.volume_plan)
    second = framework.decide(facts(user("second", "two")))
    assert second.volume_plan.bindings == () and second.volume_plan.provisions == (("ns", "two"),)
    framework.cluster.storage.forget(first.volume_plan)  # the binding failed: the volume is free again
    assert framework.decide(facts(user("second", "two"))).volume_plan.bindings == ((("ns", "two"), "pv-a"),)


def test_an_assumption_gives_way_to_a_newer_version_from_the_api():
    storage = with_storage(scheduler(node("a")), WFFC, claim("one"), volume("pv-a", zone="zone-a")).cluster.storage
    storage.assume(volumes.Plan("a", bindings=((("ns", "one"), "pv-a"),)))
    assert storage.volume("pv-a").claim_ref == ("ns", "one", "uid-one")
    storage.set("PersistentVolume", volume("pv-a", zone="zone-a", version="1"))  # the same version: kept
    assert storage.volume("pv-a").claim_ref is not None
    storage.set("PersistentVolume", volume("pv-a", zone="zone-a", version="2"))  # newer: the API's word
    assert storage.volume("pv-a").claim_ref is None


def test_prebind_writes_name_the_version_decided_on_and_settled_waits_for_the_pv_controller():
    storage = with_storage(scheduler(node("a")), WFFC, claim("one"), claim("two"),
                           volume("pv-a", zone="zone-a")).cluster.storage
    plan = volumes.Plan("a", bindings=((("ns", "one"), "pv-a"),), provisions=(("ns", "two"),))
    changes = {change.key: change for change in volumes.writes(storage, plan)}
    assert changes["pv/pv-a"].patch["spec"]["claimRef"]["uid"] == "uid-one"
    assert changes["pv/pv-a"].patch["metadata"] == {"resourceVersion": "1", "annotations": {
        volumes.BOUND_BY_CONTROLLER: "yes"}}
    assert changes["pvc/ns/two"].patch["metadata"]["annotations"] == {volumes.SELECTED_NODE: "a"}
    written = {"pv/pv-a": "5", "pvc/ns/two": "6"}
    labels = {"topology.kubernetes.io/zone": "zone-a"}
    assert volumes.settled(storage, plan, written, labels) is False  # the watch has not shown our writes
    bound_pv = volume("pv-a", zone="zone-a", version="7")
    bound_pv["spec"]["claimRef"] = {"namespace": "ns", "name": "one", "uid": "uid-one"}
    storage.set("PersistentVolume", bound_pv)
    done = {volumes.BIND_COMPLETED: "yes"}
    storage.set("PersistentVolumeClaim", claim("one", volume="pv-a", **done))
    storage.set("PersistentVolumeClaim", claim("two", volume="pv-b", version="8", **done,
                                               **{volumes.SELECTED_NODE: "a"}))
    assert volumes.settled(storage, plan, written, labels) is False  # pv-b not seen yet
    storage.set("PersistentVolume", volume("pv-b", zone="zone-b"))
    assert volumes.settled(storage, plan, written, labels) == \
        'pv "pv-b" node affinity doesn\'t match node "a": no matching NodeSelectorTerms'


def test_a_storage_object_the_parsers_choke_on_is_counted_and_the_rest_taken_in():
    model = watched.WatchedCluster()
    model.storage_relisted("PersistentVolumeClaim", [claim("bad", size="ten"), claim("good")], now=NOW)
    assert model.rejected["PersistentVolumeClaim"] == 1
    assert set(model.cluster.storage.claims) == {("ns", "good")}


def test_simulate_reads_storage_objects_and_explains_volume_rejections(tmp_path):
    nodes = [node("a", zone="zone-a"), node("b", zone="zone-b")]
    local = {**WFFC, "provisioner": volumes.NO_PROVISIONER}  # pre-provisioned volumes only, as for local NVMe
    inputs = [local, claim("data"), claim("gone", volume="pv-gone", **{volumes.BIND_COMPLETED: "yes"}),
              volume("pv-b", zone="zone-b"), user("train", "data"), user("stuck", "gone"), user("lost", "nothing")]
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all(nodes))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(inputs))
    (tmp_path / "config.yaml").write_text("schedulerName: gpu-scheduler\n")
    result = gpu_scheduler("simulate", "--nodes", str(tmp_path / "nodes.yaml"), "--pods",
                           str(tmp_path / "pods.yaml"), "--config", str(tmp_path / "config.yaml")).stdout
    lines = {line.split()[0]: line for line in result.splitlines() if line.startswith("ns/")}
    assert " b " in lines["ns/train"] and "claims: data -> pv-b" in lines["ns/train"]
    # VolumeZone's PreFilter looks the volume up before VolumeBinding's Filter would say the same per node
    assert '0/2 nodes are available: persistentvolume "pv-gone" not found.' in lines["ns/stuck"]
    assert 'persistentvolumeclaim "nothing" not found' in lines["ns/lost"]
