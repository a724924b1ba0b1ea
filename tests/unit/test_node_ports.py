"""Host ports (NodePorts): which ports a pod holds, their accounting on its node whoever scheduled it, and the
filter over them. The upstream cases are in test_upstream_nodeports.py; these are the rest."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from scheduler_core import framework, pods, watched
from tests.unit.builders import facts, node, pod, scheduler

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
TAKEN = "node(s) didn't have free ports for the requested pod ports"
HostPort = pods.HostPort


def with_ports(name: str, *ports: dict[str, Any], node_name: str | None = None, group: str = "containers",
               restart: str | None = None, uid: str | None = None) -> dict[str, Any]:
    obj = pod(name, gpus=1, node_name=node_name)
    container = {"name": "c", "image": "x", "ports": list(ports), **({"restartPolicy": restart} if restart else {})}
    obj["spec"][group] = [*obj["spec"].get(group, []), container]
    if uid:
        obj["metadata"]["uid"] = uid
    return obj


@pytest.mark.parametrize(
    ("obj", "held"),
    [
        (with_ports("p", {"containerPort": 80, "hostPort": 8080}), (HostPort("0.0.0.0", "TCP", 8080),)),
        (with_ports("p", {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}),
         (HostPort("10.0.0.1", "UDP", 53),)),
        (with_ports("p", {"containerPort": 80, "hostPort": 0}, {"containerPort": 81}), ()),
        (with_ports("p", {"containerPort": 80, "hostPort": 80, "protocol": "", "hostIP": ""}),
         (HostPort("0.0.0.0", "TCP", 80),)),  # empty means the default, as HostPortInfo reads it
        (with_ports("p", {"containerPort": 80, "hostPort": 80}, group="initContainers", restart="Always"),
         (HostPort("0.0.0.0", "TCP", 80),)),  # a sidecar runs as long as the pod
        (with_ports("p", {"containerPort": 80, "hostPort": 80}, group="initContainers"), ()),
        (with_ports("p", {"containerPort": 80, "hostPort": 80}, group="initContainers", restart="OnFailure"), ()),
    ],
)
def test_the_host_ports_a_pod_holds(obj, held):
    parsed = facts(obj)
    assert (parsed.host_ports, parsed.problems) == (held, ())


@pytest.mark.parametrize(
    ("port", "problem"),
    [
        ({"hostPort": "8080"}, 'spec.containers[1].ports[0].hostPort: must be an integer from 0 to 65535, got "8080"'),
        ({"hostPort": 70000}, 'spec.containers[1].ports[0].hostPort: must be an integer from 0 to 65535, got "70000"'),
        ({"hostPort": -1}, 'spec.containers[1].ports[0].hostPort: must be an integer from 0 to 65535, got "-1"'),
        ({"hostPort": True}, 'spec.containers[1].ports[0].hostPort: must be an integer from 0 to 65535, got "True"'),
        ({"hostPort": 80, "protocol": "tcp"},
         'spec.containers[1].ports[0].protocol: must be one of TCP, UDP, SCTP, got "tcp"'),
        ({"hostPort": 80, "hostIP": ["x"]}, "spec.containers[1].ports[0].hostIP: must be an IP address, got \"['x']\""),
        ({"hostPort": 80, "hostIP": "1" * 100},
         f'spec.containers[1].ports[0].hostIP: must be an IP address, got "{"1" * 40}"… (100 characters)'),
    ],
)
def test_a_host_port_that_cannot_be_read_is_a_problem(port, problem):
    parsed = facts(with_ports("p", {"containerPort": 80, **port}))
    assert (parsed.host_ports, parsed.problems) == ((), (problem,))


def test_a_port_held_by_a_bound_pod_of_any_scheduler_keeps_others_off_its_node():
    s = scheduler(node("a"), node("b"))
    other = with_ports("daemon", {"containerPort": 9100, "hostPort": 9100}, node_name="a")
    other["spec"]["schedulerName"] = "default-scheduler"
    s.cluster.restore(facts(other))
    wanted = facts(with_ports("p", {"containerPort": 9100, "hostPort": 9100, "hostIP": "10.0.0.7"}))
    assert s.decide(wanted).node == "b"
    s.place(facts(with_ports("q", {"containerPort": 9100, "hostPort": 9100}, uid="q")))  # lands on b
    decision = s.decide(wanted)
    assert (decision.node, decision.reason) == (None, f"0/2 nodes are available: 2 {TAKEN}.")
    assert s.evaluate(wanted, ["a", "b"])[1] == {"a": ("NodePorts", TAKEN), "b": ("NodePorts", TAKEN)}


def test_a_port_is_free_again_once_every_pod_holding_it_has_left():
    """Counted, not a set: two pods holding one port (one bound by another scheduler) both have to leave."""
    model = watched.WatchedCluster(scheduler_name="gpu-scheduler")
    model.nodes_relisted([node("a")], now=NOW)
    holders = [with_ports(f"h{i}", {"containerPort": 80, "hostPort": 80}, node_name="a", uid=f"h{i}") for i in (1, 2)]
    model.pods_relisted(holders, now=NOW)
    wanted = facts(with_ports("p", {"containerPort": 80, "hostPort": 80, "protocol": "TCP"}))
    decide = framework.Framework(model.cluster).decide
    model.pod_event("DELETED", holders[0], now=NOW)
    assert decide(wanted).node is None
    model.pod_event("DELETED", holders[1], now=NOW)
    assert decide(wanted).node == "a"
    assert model.cluster.port_holders == {}


def test_ports_leave_with_their_node_and_come_back_with_it():
    model = watched.WatchedCluster(scheduler_name="gpu-scheduler")
    model.nodes_relisted([node("a")], now=NOW)
    model.pods_relisted([with_ports("h", {"containerPort": 80, "hostPort": 80}, node_name="a", uid="h")], now=NOW)
    model.node_event("DELETED", node("a"), now=NOW)
    assert model.cluster.port_holders == {}
    model.node_event("ADDED", node("a"), now=NOW)
    assert model.cluster.rows_holding([HostPort("0.0.0.0", "TCP", 80)]) == {model.cluster.index["a"]}


def test_a_pod_without_host_ports_costs_the_filter_nothing():
    s = scheduler(node("a"))
    s.cluster.restore(facts(with_ports("h", {"containerPort": 80, "hostPort": 80}, node_name="a")))
    assert s.decide(facts(pod("p", gpus=1))).node == "a"
