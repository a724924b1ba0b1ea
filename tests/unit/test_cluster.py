"""GPU device accounting and incremental updates of the cluster model."""

import pytest

from scheduler_core import cluster, nodes
from scheduler_core.pods import Device
from tests.unit.builders import facts, node, pod


def model(*objs):
    c = cluster.Cluster()
    for obj in objs:
        c.set_node(nodes.parse(obj))
    return c


def free(c, name):
    row = c.index[name]
    return list(c.gpu_free[row, : c.gpu_count[row]])


def test_assign_and_unassign_update_devices_and_resources():
    c = model(node("a", gpus=4))
    c.assign(facts(pod("p", gpus=2, cpu="1")), "a", (Device(0, 1000), Device(1, 1000)))
    c.assign(facts(pod("s", milli=250)), "a", (Device(2, 250),))
    assert free(c, "a") == [0, 0, 750, 1000]
    assert c.whole_free[c.index["a"]] == 1
    assert c.used[c.column("cpu"), c.index["a"]] == 1000
    assert c.gpu_totals() == (2250, 4000)
    c.unassign("ns/p")
    assert free(c, "a") == [1000, 1000, 750, 1000] and c.whole_free[c.index["a"]] == 3
    assert c.used[c.column("cpu"), c.index["a"]] == 0


@pytest.mark.parametrize(
    "devices",
    [(Device(0, 1000),), (Device(7, 1000),), (Device(0, 800),)],
    ids=["taken", "no-such-gpu", "share-too-big"],
)
def test_assign_refuses_to_overcommit(devices):
    c = model(node("a", gpus=2))
    c.assign(facts(pod("first", milli=300)), "a", (Device(0, 300),))
    with pytest.raises(cluster.OvercommitError):
        c.assign(facts(pod("p", gpus=1)), "a", devices)
    assert free(c, "a") == [700, 1000]


def test_restore_uses_the_recorded_devices_and_falls_back_to_first_fit():
    c = model(node("a", gpus=4))
    annotated = pod("p", gpus=2, node_name="a",
                    annotations={"gpu-scheduler.io/gpu-devices": '[{"index":2,"milli":1000},{"index":3,"milli":1000}]'})
    c.restore(facts(annotated))
    assert free(c, "a") == [1000, 1000, 0, 0]
    c.restore(facts(pod("other", gpus=1, node_name="a")))  # another scheduler's pod: first idle GPU
    assert free(c, "a") == [0, 1000, 0, 0]
    clashing = pod("clash", gpus=1, node_name="a",
                   annotations={"gpu-scheduler.io/gpu-devices": '[{"index":2,"milli":1000}]'})
    c.restore(facts(clashing))  # its recorded GPU is taken: it gets a free one, none is shared twice
    assert free(c, "a") == [0, 0, 0, 0]


def test_restore_is_idempotent_and_ignores_unknown_nodes():
    c = model(node("a", gpus=2))
    bound = facts(pod("p", gpus=1, node_name="a"))
    c.restore(bound)
    c.restore(bound)
    assert free(c, "a") == [0, 1000]
    c.restore(facts(pod("q", gpus=1, node_name="gone")))
    assert "ns/q" not in c.assignments


def test_updating_a_node_keeps_its_pods_and_regrows_devices():
    c = model(node("a", gpus=2))
    c.assign(facts(pod("p", gpus=1)), "a", (Device(1, 1000),))
    c.set_node(nodes.parse(node("a", gpus=4, labels={"new": "label"})))
    assert free(c, "a") == [1000, 0, 1000, 1000]
    assert c.node(c.index["a"]).labels["new"] == "label"


def test_removing_a_node_forgets_its_pods_and_the_slot_is_reused():
    c = model(node("a"), node("b"))
    c.assign(facts(pod("p", gpus=1)), "a", (Device(0, 1000),))
    c.remove_node("a")
    assert "ns/p" not in c.assignments and c.node_count == 1
    row = c.set_node(nodes.parse(node("c")))
    assert row == 0 and free(c, "c") == [1000] * 8


def test_many_nodes_grow_the_arrays():
    c = model(*[node(f"n{i:03}", gpus=(i % 3) * 4) for i in range(100)])
    assert c.node_count == 100 and c.gpu_totals() == (0, sum((i % 3) * 4 for i in range(100)) * 1000)
    c.set_node(nodes.parse(node("huge", gpus=16, extra={"example.com/fpga": "2"})))
    assert c.gpu_count[c.index["huge"]] == 16 and c.alloc[c.column("example.com/fpga"), c.index["huge"]] == 2000
    assert c.gpu_count[c.index["n001"]] == 4


def with_images(obj, images):
    obj["status"]["images"] = [{"names": [name], "sizeBytes": size} for name, size in images.items()]
    return obj


def test_the_image_index_follows_node_updates_and_removals():
    c = model(with_images(node("a"), {"img:1": 10}), with_images(node("b"), {"img:1": 20, "img:2": 5}))
    rows, sizes = c.image_holders("img:1")
    assert dict(zip(rows.tolist(), sizes.tolist())) == {c.index["a"]: 10, c.index["b"]: 20}
    c.set_node(nodes.parse(with_images(node("a"), {"img:2": 7})))
    assert c.image_holders("img:1")[0].tolist() == [c.index["b"]]
    assert sorted(c.image_holders("img:2")[1].tolist()) == [5, 7]
    c.remove_node("b")
    c.remove_node("a")
    assert c.images == {} and c.image_holders("img:1") is None
