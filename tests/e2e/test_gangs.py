"""Gangs with `gpu-scheduler run` on the real apiserver, with scheduler-plugins' real coscheduling CRD installed
(`PodGroup`, scheduling.x-k8s.io/v1alpha1, fetched from its Go module by hack/control-plane.sh build).

Each scenario has a node pool of its own, chosen by the members' node selector, so scenarios never share room."""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import GPU, start_scheduler

SUFFIX = uuid.uuid4().hex[:5]
SCHEDULER = f"gangs-{SUFFIX}"
NAMESPACE = f"gangs-{SUFFIX}"
GROUP, VERSION = "scheduling.x-k8s.io", "v1alpha1"
PRIORITIES = {"low": 10, "high": 1000}


def coscheduling_crd() -> Path:
    binaries = cp.find_binaries()
    assert binaries is not None
    crd = binaries.parent / "crds" / "coscheduling" / "crd.yaml"
    if not crd.is_file():
        pytest.fail(f"the coscheduling CRD is missing ({crd}): run hack/control-plane.sh build")
    return crd


@pytest.fixture(scope="module")
def cluster(plane: Any, api: Any, scheduler_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The CRD (installed once for the session), the namespace and one `gpu-scheduler run` for the module."""
    from tests.e2e.conftest import LOG_SOURCES

    extensions: Any = client.ApiextensionsV1Api(api)
    crd = yaml.safe_load(coscheduling_crd().read_text())
    try:
        extensions.create_custom_resource_definition(crd)
    except ApiException as err:
        if err.status != 409:
            raise
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                         extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or ()),
             timeout=30, what="the PodGroup CRD to be established")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    work = tmp_path_factory.mktemp("gangs")
    config = work / "config.yaml"
    config.write_text(f"schedulerName: {SCHEDULER}\n")
    state: dict[str, Any] = {"work": work, "config": config, "kubeconfig": scheduler_kubeconfig}
    scheduling: Any = client.SchedulingV1Api(api)
    for level, value in PRIORITIES.items():
        scheduling.create_priority_class({"metadata": {"name": f"{level}-{SUFFIX}"}, "value": value})
    state["scheduler"] = start_scheduler(scheduler_kubeconfig, work, "--config", str(config), name="gangs-run")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run (gangs)", state["scheduler"].logs()[-8000:]))
    yield state
    state["scheduler"].stop()
    for level in PRIORITIES:
        scheduling.delete_priority_class(f"{level}-{SUFFIX}")


def pool(api: Any, name: str, count: int, gpus: int = 8) -> list[str]:
    nodes = [f"{name}-{SUFFIX}-{i}" for i in range(count)]
    for node in nodes:
        add_node(api, name, node, gpus)
    return nodes


def add_node(api: Any, pool_name: str, node: str, gpus: int = 8) -> None:
    cp.create_gpu_node(api, node, gpus=gpus, labels={"e2e-pool": f"{pool_name}-{SUFFIX}"})


def podgroup(api: Any, name: str, min_member: int) -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "podgroups",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
         "spec": {"minMember": min_member}})


def member(api: Any, name: str, group: str | None, pool_name: str, *, gpus: int = 8, node: str | None = None,
           priority_class: str | None = None) -> Any:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"e2e-pool": f"{pool_name}-{SUFFIX}"},
        "containers": [{"name": "worker", "image": "registry.invalid/pytorch:2", "resources": {"limits": {GPU: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    body = {"metadata": {"name": name, "labels": labels}, "spec": spec}
    return client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, body)


def placement(api: Any, names: list[str]) -> dict[str, str | None]:
    core: Any = client.CoreV1Api(api)
    return {name: core.read_namespaced_pod(name, NAMESPACE).spec.node_name for name in names}


def group_events(api: Any, group: str) -> list[tuple[str, str]]:
    """(reason, message) of the events on the PodGroup `group`."""
    events = client.CoreV1Api(api).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.kind=PodGroup,involvedObject.name={group}").items
    return [(e.reason, e.message) for e in events]


def metrics(scheduler: Any) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics", timeout=5) as reply:
            return str(reply.read().decode())
    except OSError:
        return None


def gang_attempts(scheduler: Any, result: str) -> float:
    text = wait_for(lambda: metrics(scheduler), timeout=30, what="the scheduler's /metrics")
    prefix = f'gpu_scheduler_gang_attempts_total{{result="{result}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_a_gang_of_4_x_8_gpus_lands_whole_in_one_decision(api, cluster):
    nodes = pool(api, "whole", 5)
    before = gang_attempts(cluster["scheduler"], "scheduled")
    podgroup(api, "whole", 4)
    names = [f"whole-{i}" for i in range(4)]
    for name in names:
        member(api, name, "whole", "whole")
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="all 4 members bound")
    where = placement(api, names)
    assert len(set(where.values())) == 4 and set(where.values()) <= set(nodes)  # one 8-GPU node each
    scheduled = wait_for(lambda: [m for reason, m in group_events(api, "whole") if reason == "Scheduled"],
                         timeout=30, what="the gang's Scheduled event")
    assert len(scheduled) == 1 and scheduled[0].startswith("gang ")  # one decision placed all four
    assert scheduled[0].split(":")[1].strip().startswith("4 member(s) placed")
    assert gang_attempts(cluster["scheduler"], "scheduled") == before + 1
    status = wait_for(lambda: (found := client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "podgroups", "whole").get("status") or {}).get("phase") == "Scheduling" and found,
        timeout=30, what="the PodGroup's phase Scheduling")  # written after the bindings
    assert status.get("scheduleStartTime")


def test_a_gang_with_room_for_3_of_4_binds_none_says_why_and_binds_all_once_a_node_is_added(api, cluster):
    pool(api, "short", 3)
    podgroup(api, "short", 4)
    names = [f"short-{i}" for i in range(4)]
    for name in names:
        member(api, name, "short", "short")
    expected = f"gang {NAMESPACE}/short: 3/4 members fit; 1 x 8 GPUs short"
    wait_for(lambda: [m for reason, m in group_events(api, "short") if reason == "FailedScheduling"
                      and m.startswith(expected)], timeout=30, what="the PodGroup's FailedScheduling event")
    time.sleep(1)  # the scheduler has decided: had it bound anyone, the API would show it by now
    assert not any(placement(api, names).values())
    condition = next(c for c in client.CoreV1Api(api).read_namespaced_pod("short-0", NAMESPACE).status.conditions
                     if c.type == "PodScheduled")
    assert condition.status == "False" and condition.message.startswith(expected)
    add_node(api, "short", f"short-{SUFFIX}-3")
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="all 4 members bound after the node came")
    assert len(set(placement(api, names).values())) == 4


def test_two_gangs_that_fit_one_at_a_time_never_split(api, cluster):
    pool(api, "rival", 2)
    podgroup(api, "rival-a", 2)
    podgroup(api, "rival-b", 2)
    names = ["rival-a-0", "rival-b-0", "rival-a-1", "rival-b-1"]
    for name in names:
        member(api, name, name.rsplit("-", 1)[0], "rival")
    wait_for(lambda: sum(1 for node in placement(api, names).values() if node) == 2, timeout=60,
             what="one gang bound")
    time.sleep(1)
    where = placement(api, names)
    bound = {name.rsplit("-", 1)[0] for name, node in where.items() if node}
    assert len(bound) == 1 and sum(1 for node in where.values() if node) == 2  # one whole gang, never a half of each
    waiting = ({"rival-a", "rival-b"} - bound).pop()
    wait_for(lambda: any(r == "FailedScheduling" for r, _ in group_events(api, waiting)), timeout=30,
             what="the other gang told why it waits")


def test_after_a_restart_midway_the_gang_is_finished_without_placing_any_member_twice(api, cluster):
    """The state a scheduler killed after binding 2 of 4 members leaves: those 2 bound (with their devices), 2
    pending. A new scheduler counts the bound ones toward minMember and places only the other 2."""
    nodes = pool(api, "restart", 4)
    cluster["scheduler"].stop()
    podgroup(api, "restart", 4)
    devices = '[{"index":0,"milli":1000},{"index":1,"milli":1000},{"index":2,"milli":1000},{"index":3,"milli":1000},' \
              '{"index":4,"milli":1000},{"index":5,"milli":1000},{"index":6,"milli":1000},{"index":7,"milli":1000}]'
    for i in range(2):
        member(api, f"restart-{i}", "restart", "restart", node=nodes[i])
        client.CoreV1Api(api).patch_namespaced_pod(f"restart-{i}", NAMESPACE,
                                                   {"metadata": {"annotations": {"gpu-scheduler.io/gpu-devices": devices}}})
    for i in range(2, 4):
        member(api, f"restart-{i}", "restart", "restart")
    cluster["scheduler"] = start_scheduler(cluster["kubeconfig"], cluster["work"], "--config", str(cluster["config"]),
                                           name="gangs-run-restarted")
    names = [f"restart-{i}" for i in range(4)]
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="the 2 pending members bound")
    where = placement(api, names)
    assert where["restart-0"] == nodes[0] and where["restart-1"] == nodes[1]
    assert sorted(where.values()) == sorted(nodes)  # the two new ones on the two free nodes: nothing doubled
    wait_for(lambda: any("2 member(s) placed (2 placed before, minMember 4)" in m
                         for reason, m in group_events(api, "restart") if reason == "Scheduled"),
             timeout=30, what="the restarted scheduler's Scheduled event, counting the 2 bound before")


def test_a_gang_preempts_lower_priority_pods_only_as_a_unit(api, cluster):
    """Two nodes, each held by a low-priority pod, a third by a high-priority one: a high-priority gang of 2
    evicts the two low ones and lands; a gang of 3 would need the high one gone too, and evicts nothing."""
    nodes = pool(api, "evict", 3)
    member(api, "evict-low-0", None, "evict", node=nodes[0], priority_class=f"low-{SUFFIX}")
    member(api, "evict-low-1", None, "evict", node=nodes[1], priority_class=f"low-{SUFFIX}")
    member(api, "evict-top", None, "evict", node=nodes[2], priority_class=f"high-{SUFFIX}")
    podgroup(api, "evict-big", 3)
    for i in range(3):
        member(api, f"evict-big-{i}", "evict-big", "evict", priority_class=f"high-{SUFFIX}")
    wait_for(lambda: any("preemption: room for 2/3 members" in m for r, m in group_events(api, "evict-big")
                         if r == "FailedScheduling"), timeout=30, what="the big gang to find no whole room")
    held = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={nodes[0]}").items
    assert [(p.metadata.name, p.metadata.deletion_timestamp) for p in held] == [("evict-low-0", None)]  # untouched
    for i in range(3):
        client.CoreV1Api(api).delete_namespaced_pod(f"evict-big-{i}", NAMESPACE, grace_period_seconds=0)
    podgroup(api, "evict", 2)
    names = ["evict-0", "evict-1"]
    for name in names:
        member(api, name, "evict", "evict", priority_class=f"high-{SUFFIX}")
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="the gang bound after its preemption")
    assert sorted(placement(api, names).values()) == nodes[:2]
    remaining = {p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
                 if p.metadata.name.startswith("evict-") and not p.metadata.name.startswith("evict-big")}
    assert remaining == {"evict-top", "evict-0", "evict-1"}
    preempted = client.CoreV1Api(api).list_namespaced_event(NAMESPACE, field_selector="reason=Preempted").items
    assert {e.involved_object.name for e in preempted} >= {"evict-low-0", "evict-low-1"}


# --- Kubernetes' alpha Workload API (scheduling.k8s.io/v1alpha2) ------------------------------------------

WORKLOAD_GROUP, WORKLOAD_VERSION = "scheduling.k8s.io", "v1alpha2"


def workload_podgroup(api: Any, name: str, min_count: int) -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        WORKLOAD_GROUP, WORKLOAD_VERSION, NAMESPACE, "podgroups",
        {"apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}", "kind": "PodGroup", "metadata": {"name": name},
         "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})


def workload_member(api: Any, name: str, group: str, pool_name: str, gpus: int = 8) -> Any:
    body = {"metadata": {"name": name}, "spec": {
        "schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0, "schedulingGroup": {"podGroupName": group},
        "nodeSelector": {"e2e-pool": f"{pool_name}-{SUFFIX}"},
        "containers": [{"name": "worker", "image": "registry.invalid/pytorch:2", "resources": {"limits": {GPU: str(gpus)}}}]}}
    created = client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, body)
    return created


def scheduled_condition(api: Any, group: str) -> dict[str, Any] | None:
    found = client.CustomObjectsApi(api).get_namespaced_custom_object(
        WORKLOAD_GROUP, WORKLOAD_VERSION, NAMESPACE, "podgroups", group)
    return next((c for c in (found.get("status") or {}).get("conditions") or () if c["type"] == "PodGroupScheduled"),
                None)


def test_the_workload_api_gang_waits_whole_then_lands_whole_and_its_condition_says_so(api, cluster):
    """The same core scenario through the upstream alpha API: the pods name their PodGroup in
    spec.schedulingGroup, the PodGroup asks for a gang of minCount; its PodGroupScheduled condition follows."""
    pool(api, "upstream", 3)
    workload_podgroup(api, "upstream", 4)
    names = [f"upstream-{i}" for i in range(4)]
    for name in names:
        workload_member(api, name, "upstream", "upstream")
    assert client.CoreV1Api(api).read_namespaced_pod(names[0], NAMESPACE).spec.scheduling_group.pod_group_name == \
        "upstream"  # the apiserver serves the field
    unschedulable = wait_for(lambda: (c := scheduled_condition(api, "upstream")) and c["status"] == "False"
                             and "3/4 members fit" in c["message"] and c, timeout=30,
                             what="PodGroupScheduled=False saying what is short")
    assert unschedulable["reason"] == "Unschedulable"
    assert not any(placement(api, names).values())
    add_node(api, "upstream", f"upstream-{SUFFIX}-3")
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="all 4 members bound")
    done = wait_for(lambda: (c := scheduled_condition(api, "upstream")) and c["status"] == "True" and c, timeout=30,
                    what="PodGroupScheduled=True")
    assert done["reason"] == "Scheduled" and "4 member(s) placed" in done["message"]


def test_the_scheduler_killed_while_binding_a_gang_finishes_it_after_restart_placing_no_member_twice(
        plane, api, cluster):
    """A real kill: the scheduler binds one member at a time (`--binder-threads 1`) through a proxy that holds every
    chunk 0.3 s, and is SIGKILLed the moment the API shows the gang's first member bound, the other bindings in
    flight or not sent. A new scheduler (no proxy) finds what landed, counts it toward minMember, and places the
    rest: every member bound once, one 8-GPU member per node."""
    from tests.e2e.chaos import LatencyProxy, kill_tree

    nodes = pool(api, "killed", 4)
    cluster["scheduler"].stop()
    proxy = LatencyProxy(plane.server, latency=0.3).start()
    slow = start_scheduler(proxy.kubeconfig(cluster["kubeconfig"], cluster["work"] / "slow.kubeconfig"),
                           cluster["work"], "--config", str(cluster["config"]), "--binder-threads", "1",
                           name="gangs-slow")
    names = [f"killed-{i}" for i in range(4)]
    try:
        podgroup(api, "killed", 4)
        for name in names:
            member(api, name, "killed", "killed")
        wait_for(lambda: any(placement(api, names).values()), timeout=60, interval=0.02,
                 what="the first member bound")
        kill_tree(slow.process)
    finally:
        proxy.stop()
    time.sleep(1)  # a binding the proxy had sent on lands now, or never
    landed = {name: node for name, node in placement(api, names).items() if node}
    assert 0 < len(landed) < 4, f"the kill was meant to leave the gang partly bound, but {len(landed)} landed"
    cluster["scheduler"] = start_scheduler(cluster["kubeconfig"], cluster["work"], "--config", str(cluster["config"]),
                                           name="gangs-run-after-kill")
    wait_for(lambda: all(placement(api, names).values()), timeout=60, what="the gang finished after the restart")
    where = placement(api, names)
    assert sorted(where.values()) == sorted(nodes)  # one member per node: nothing placed twice, no GPU given twice
    assert all(where[name] == node for name, node in landed.items())  # those bound before the kill stayed
    wait_for(lambda: any(f"{4 - len(landed)} member(s) placed ({len(landed)} placed before, minMember 4)" in m
                         for reason, m in group_events(api, "killed") if reason == "Scheduled"),
             timeout=30, what="the restarted scheduler's Scheduled event, counting the members bound before the kill")


def test_a_partly_placed_gang_is_told_of_its_timeout_at_the_deadline_and_stays_unknown_until_whole(api, cluster):
    """scheduleTimeoutSeconds counted from when the group first waits partly placed: one GangTimeout within a few
    seconds of the deadline (its members parked meanwhile are not what brings it), then phase Unknown, kept by later
    decisions, until the gang is whole."""
    custom: Any = client.CustomObjectsApi(api)
    nodes = pool(api, "late", 1)
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "podgroups", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "late"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 8}})
    member(api, "late-0", "late", "late", node=nodes[0])  # bound before: it holds room while the rest cannot land
    for name in ("late-1", "late-2"):
        member(api, name, "late", "late", gpus=16)
    waiting = f"gang {NAMESPACE}/late: "
    wait_for(lambda: [m for reason, m in group_events(api, "late") if reason == "FailedScheduling"
                      and m.startswith(waiting)], timeout=30, what="the gang's first FailedScheduling")
    first_wait = time.monotonic()
    told = wait_for(lambda: [m for reason, m in group_events(api, "late") if reason == "GangTimeout"], timeout=30,
                    what="the GangTimeout event")
    late_by = time.monotonic() - first_wait
    assert late_by < 8 + 5, f"GangTimeout came {late_by:.1f} s after the gang began to wait (timeout 8 s)"
    assert told == [f"gang {NAMESPACE}/late: 1/3 members placed for more than 8 s (scheduleTimeoutSeconds) while the "
                    f"rest cannot be; {NAMESPACE}/late-0 hold their room meanwhile"]

    def phase() -> str | None:
        group = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "podgroups", "late")
        return (group.get("status") or {}).get("phase")

    wait_for(lambda: phase() == "Unknown", timeout=15, what="the PodGroup's phase Unknown")
    add_node(api, "late", f"late-{SUFFIX}-small", gpus=8)  # a new decision, still short of room
    wait_for(lambda: len([m for reason, m in group_events(api, "late") if reason == "FailedScheduling"]) >= 2,
             timeout=30, what="a second FailedScheduling after the node came")
    assert phase() == "Unknown" and [r for r, _ in group_events(api, "late")].count("GangTimeout") == 1
    add_node(api, "late", f"late-{SUFFIX}-big", gpus=32)
    wait_for(lambda: all(placement(api, ["late-1", "late-2"]).values()), timeout=60, what="the rest bound")
    wait_for(lambda: phase() == "Scheduling", timeout=15, what="the PodGroup's phase Scheduling once whole")
