"""End-to-end scheduling throughput on one real control plane, three ways side by side.

N fake GPU nodes (default 1000, 8 GPUs each) and M one-GPU pods. For each way the pods are
created first (nothing schedules them yet), then the scheduler starts, and the clock runs
until the API shows every pod bound:

  (a) gpu-scheduler run             our standalone scheduler
  (b) kube-scheduler                the real one, default profile, nvidia.com/gpu as a plain extended resource
  (c) kube-scheduler + extender     the real one calling `gpu-scheduler extender` (filter, prioritize, bind)
  (t) kube-scheduler + trivial      the same, calling benchmarks/trivial_extender.py: the ceiling of any
                                    extender served this way on this machine
  (f) the floor                     benchmarks/floor.py: the same pods bound round-robin over nodes with room,
                                    no decision at all, through our client, Binding and binder threads: the
                                    most pods/s any scheduler gets from this apiserver on this machine

Runs the ways --rounds times (default 3), alternating their order, since runs on this machine differ
by 15-30%; prints each round and the medians of pods/s and of the ratios a/b, c/b and t/b (each
round's against kube-scheduler's rate in the same round) and, with the floor, a/f and b/f: each
scheduler's rate as a fraction of the floor's. Targets: a/b >= 1.0; c/b >= 0.5 (a trivial HTTP
extender measured upstream kept about 0.11); a/f >= 0.9 on basic and >= b/f on every workload.

Workloads (--workload, several separated by commas, or `all`): basic; groups of 3 pods with required
anti-affinity per node, required affinity to their zone, a DoNotSchedule or a ScheduleAnyway zone spread
(after upstream scheduler_perf's SchedulingPodAntiAffinity, SchedulingPodAffinity, TopologySpreading,
PreferredTopologySpreading); gangs: groups of 3 in Workload-API PodGroups with minCount 3 (a smaller last
group: its size; the apiserver serves scheduling.k8s.io/v1alpha2, kube-scheduler runs its GangScheduling
plugin); preemption: every node full of low-priority pods bound before the clock starts (two of 4 GPUs
each), and the measured pods of high priority ask 4 GPUs each, so each binding needs an eviction
(scheduler_perf's PreemptionBasic, with GPUs); volumes: each pod with a claim of its own, bound before the clock
starts to a volume in one of the three zones (VolumeBinding, VolumeZone; after scheduler_perf's SchedulingCSIPVs).
Needs the binaries from `hack/control-plane.sh build`.

    python benchmarks/scheduler_e2e.py [--nodes 1000] [--pods 2000] [--rounds 3] [--workload basic] [--json]
    python benchmarks/scheduler_e2e.py --ways a,b,f --workload all --rounds 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import gangs, preemption, sides  # noqa: E402
from tests import servers  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402

CONFIG = "schedulerName: gpu-scheduler\nadmission: {rules: [{name: any-gpu}]}\n"


def create_nodes(api: Any, count: int) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda i: cp.create_gpu_node(api, f"bench-{i:05d}", gpus=8, zone=f"zone-{i % 3}"),
                      range(count)))


GROUP = 3  # pods per application group in the constraint workloads
WORKLOADS = ("basic", "anti-affinity", "affinity", "spread", "preferred-spread", "gangs", "preemption", "volumes")
PREEMPTION_GPUS = 4  # each low-priority pod of the preemption fill, and each measured pod, asks this many
LOW, HIGH = preemption.LOW, preemption.HIGH


def pod_body(i: int, scheduler_name: str, workload: str) -> dict[str, Any]:
    """One one-GPU pod; in the constraint workloads it belongs to a group of GROUP pods that wants one pod per node,
    one zone, or an even spread over the zones, or that is a gang; in preemption, a high-priority 4-GPU pod."""
    gpus = PREEMPTION_GPUS if workload == "preemption" else 1
    spec: dict[str, Any] = {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0, "containers": [{
        "name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    group = {"app": f"g{i // GROUP}"}
    if workload == "gangs":
        spec["schedulingGroup"] = {"podGroupName": f"g{i // GROUP}"}
    elif workload == "volumes":
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]
    elif workload == "preemption":
        spec["priorityClassName"] = HIGH
    elif workload == "anti-affinity":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": group}, "topologyKey": "kubernetes.io/hostname"}]}}
    elif workload == "affinity":
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": group}, "topologyKey": "topology.kubernetes.io/zone"}]}}
    elif workload in ("spread", "preferred-spread"):
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": group},
            "whenUnsatisfiable": "DoNotSchedule" if workload == "spread" else "ScheduleAnyway"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}", "labels": group}, "spec": spec}


def prepare(api: Any, namespace: str, workload: str, nodes: int, pods: int) -> None:
    """What a workload needs before its pods: the gangs' PodGroups; the volumes and their claims; for preemption,
    every node filled with low-priority pods bound at creation (spec.nodeName: placed long ago, by no scheduler of
    this run)."""
    from kubernetes import client

    if workload == "gangs":
        custom: Any = client.CustomObjectsApi(api)
        group, version = gangs.WORKLOAD
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda g: custom.create_namespaced_custom_object(group, version, namespace, "podgroups", {
                "apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": f"g{g}"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min(GROUP, pods - g * GROUP)}}}}),
                range((pods + GROUP - 1) // GROUP)))
    elif workload == "volumes":
        create_volumes(api, namespace, pods)
    elif workload == "preemption":
        core: Any = client.CoreV1Api(api)
        per_node = 8 // PREEMPTION_GPUS
        limits = {"nvidia.com/gpu": str(PREEMPTION_GPUS)}

        def fill(i: int) -> None:
            core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"low-{i}", "labels": {"tier": "low"}}, "spec": {
                "nodeName": f"bench-{i // per_node:05d}", "priorityClassName": LOW, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                                "resources": {"limits": limits}}]}})
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(fill, range(nodes * per_node)))


ZONAL_CLASS = "bench-zonal"


def create_volumes(api: Any, namespace: str, pods: int) -> None:
    """A claim per pod, bound to a volume of its own in one of the three zones (node affinity on
    topology.kubernetes.io/zone, as a cloud disk's): VolumeBinding finds each claim bound and VolumeZone keeps the pod
    in its volume's zone. Both sides are written bound, as the PersistentVolume controller leaves them: it binds
    about 2 claims a second here (its client's 20 QPS), too slow for 2000 (not timed)."""
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    storage: Any = client.StorageV1Api(api)
    if not storage.list_storage_class(field_selector=f"metadata.name={ZONAL_CLASS}").items:
        storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                      "metadata": {"name": ZONAL_CLASS}, "provisioner": "kubernetes.io/no-provisioner",
                                      "volumeBindingMode": "Immediate"})

    def make(i: int) -> None:
        claim, volume = f"data-{i}", f"{namespace}-data-{i}"
        made = core.create_namespaced_persistent_volume_claim(namespace, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
                "name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": ZONAL_CLASS, "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}}}})
        core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {
            "name": volume, "labels": {"bench": namespace}}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": ZONAL_CLASS,
            "hostPath": {"path": f"/mnt/{volume}"}, "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim,
                         "uid": made.metadata.uid},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": "topology.kubernetes.io/zone", "operator": "In", "values": [f"zone-{i % 3}"]}]}]}}}})
        core.patch_persistent_volume_status(volume, {"status": {"phase": "Bound"}})
        core.patch_namespaced_persistent_volume_claim_status(claim, namespace, {"status": {
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}})
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(make, range(pods)))


def delete_volumes(api: Any, namespace: str) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    core.delete_collection_namespaced_persistent_volume_claim(namespace)
    core.delete_collection_persistent_volume(label_selector=f"bench={namespace}")


def create_pods(core: Any, namespace: str, count: int, scheduler_name: str, workload: str = "basic") -> float:
    body = lambda i: pod_body(i, scheduler_name, workload)  # noqa: E731
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(namespace, body(i)), range(count)))
    return count / (time.perf_counter() - started)


def wait_bound(core: Any, namespace: str, count: int, timeout: float, progress: Any) -> tuple[float, float]:
    """(seconds from scheduler start until every pod is bound, pods/s from the scheduler's first act to the last
    binding).

    Bindings are counted from a watch, not by polling lists, which would load the apiserver all
    the schedulers share. The second figure leaves out start-up (process start, imports, initial
    list), as upstream's scheduler_perf throughput does. Its clock starts at the first binding, or at
    the first eviction where the workload preempts: kube-scheduler evicts for a while before its first
    binding, and the time it takes to preempt is part of its work.
    """
    from kubernetes import watch

    started = time.perf_counter()
    deadline = started + timeout
    bound: set[str] = set()
    first: tuple[float, int] | None = None
    while time.perf_counter() < deadline:  # a watch the apiserver ends early is listed and watched again
        listing = core.list_namespaced_pod(namespace)
        newly = {p.metadata.name for p in listing.items if p.spec.node_name and p.metadata.name.startswith("p-")}
        newly -= bound
        bound |= newly
        progress.update(len(newly))
        if first is None and bound:
            first = (time.perf_counter(), len(bound))
        if len(bound) == count:
            now = time.perf_counter()
            steady = (count - first[1]) / (now - first[0]) if first and now > first[0] else float("inf")
            return now - started, steady
        stream = watch.Watch()
        for event in stream.stream(core.list_namespaced_pod, namespace,
                                   resource_version=listing.metadata.resource_version,
                                   timeout_seconds=max(1, int(deadline - time.perf_counter())), deserialize=False):
            obj = event["object"]
            name = obj["metadata"]["name"]
            if first is None and name.startswith("low-") and (
                    event["type"] == "DELETED" or obj["metadata"].get("deletionTimestamp")):
                first = (time.perf_counter(), len(bound))  # the first eviction
            if (obj.get("spec") or {}).get("nodeName") and name.startswith("p-") and name not in bound:
                bound.add(name)
                progress.update(1)
                now = time.perf_counter()
                if first is None:
                    first = (now, len(bound))
                if len(bound) == count:
                    stream.stop()
                    steady = (count - first[1]) / (now - first[0]) if now > first[0] else float("inf")
                    return now - started, steady
    raise RuntimeError(f"{namespace}: {count - len(bound)} of {count} pods still unbound after {timeout:.0f}s")


def run_way(name: str, api: Any, nodes: int, pods: int, start: Any, scheduler_name: str, timeout: float,
            workload: str = "basic") -> dict[str, float]:
    from kubernetes import client
    from tqdm import tqdm

    core: Any = client.CoreV1Api(api)
    namespace = f"bench-{name}-{workload}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    prepare(api, namespace, workload, nodes, pods)
    create_rate = create_pods(core, namespace, pods, scheduler_name, workload)
    stop = start()
    try:
        with tqdm(total=pods, desc=f"{name} {workload}", unit="pod", file=sys.stderr) as progress:
            elapsed, steady = wait_bound(core, namespace, pods, timeout, progress)
    finally:
        stop()
    delete_pods(core, namespace, timeout)
    if workload == "volumes":
        delete_volumes(api, namespace)
    return {"pods_per_s": steady, "seconds": elapsed, "pods_per_s_with_startup": pods / elapsed,
            "create_pods_per_s": create_rate}


def delete_pods(core: Any, namespace: str, timeout: float) -> None:
    """Delete every pod of the namespace and wait until none is left (no kubelet: grace period 0; no namespace
    controller needed). A collection of tens of thousands outlasts the apiserver's 60 s request timeout (504), so it
    is asked again until the namespace is empty."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, limit=1).items and time.monotonic() < deadline:
        try:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _request_timeout=120)
        except ApiException as err:
            if err.status != 504:
                raise


WAYS = {"a": "gpu-scheduler", "b": "kube-scheduler", "c": "kube-scheduler+extender", "t": "kube-scheduler+trivial",
        "f": "floor"}
RATIOS = {"a/b": ("gpu-scheduler", "kube-scheduler"), "c/b": ("kube-scheduler+extender", "kube-scheduler"),
          "t/b": ("kube-scheduler+trivial", "kube-scheduler"), "a/f": ("gpu-scheduler", "floor"),
          "b/f": ("kube-scheduler", "floor")}
TARGETS = {"a/b": "(gpu-scheduler run / kube-scheduler), target >= 1.0",
           "c/b": "(kube-scheduler with our extender / kube-scheduler), target >= 0.5",
           "t/b": "(kube-scheduler with a trivial Python extender / kube-scheduler), the ceiling for an extender "
                  "served this way",
           "a/f": "(gpu-scheduler run / the floor), target >= 0.9 on basic and >= b/f",
           "b/f": "(kube-scheduler / the floor)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600.0, help="per way, seconds")
    parser.add_argument("--ways", default="a,b,c,t",
                        help="which of a (ours), b (kube-scheduler), c (our extender), t (trivial extender), "
                             "f (the floor: round-robin bindings, no decision)")
    parser.add_argument("--verbs", default="filter,prioritize,bind",
                        help="the extender verbs kube-scheduler calls in c and t (without bind, it binds itself): "
                             "shows what each round trip costs")
    parser.add_argument("--workload", default="basic",
                        help=f"one or more of {', '.join(WORKLOADS)} separated by commas, or all")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run the ways this many times, alternating their order; figures are medians")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    ways = [way for way in WAYS if way in args.ways.split(",")]
    workloads = list(WORKLOADS) if args.workload == "all" else args.workload.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown or not ways:
        parser.error(f"--workload {args.workload}: unknown {', '.join(unknown)}" if unknown
                     else f"--ways {args.ways}: none of {', '.join(WAYS)}")
    if "preemption" in workloads and args.pods > args.nodes * (8 // PREEMPTION_GPUS):
        parser.error(f"--pods {args.pods}: preemption evicts one low-priority pod a pod, and {args.nodes} nodes "
                     f"hold {args.nodes * (8 // PREEMPTION_GPUS)}")
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="scheduler-e2e-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text(CONFIG)
    out = sys.stderr if args.json else sys.stdout
    results: dict[str, dict[str, list[dict[str, float]]]] = {}  # workload -> way -> one result per round
    gangs = "gangs" in workloads
    with cp.ControlPlane(extra_apiserver_args=cp.WORKLOAD_API_ARGS if gangs else ()) as plane:
        api = plane.api_client()
        print(f"creating {args.nodes} nodes ...", file=sys.stderr)
        create_nodes(api, args.nodes)
        if "preemption" in workloads:
            preemption.create_priority_classes(api)

        def ours() -> Any:
            process = subprocess.Popen(
                [sys.executable, "-m", "gpu_scheduler", "run", "--config", str(config_file), "--kubeconfig",
                 str(plane.kubeconfig), "--port", str(servers.free_port()), "--log-level", "warning"],
                stdout=(work / "run.log").open("ab"), stderr=subprocess.STDOUT)
            return lambda: (process.terminate(), process.wait(15))

        def floor() -> Any:
            process = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "floor.py"), str(plane.kubeconfig),
                                        "floor"], stdout=(work / "floor.log").open("ab"), stderr=subprocess.STDOUT)
            return lambda: (process.terminate(), process.wait(15))

        # kube-scheduler's client defaults to 50 QPS, which alone would cap it at 50 bindings/s;
        # scheduler_perf lifts the limit, and so does this benchmark.
        unthrottled = {"clientConnection": {"qps": 5000, "burst": 5000}}
        gang_args = cp.GANG_SCHEDULER_ARGS if gangs else ()

        def kube_scheduler() -> Any:
            return plane.start_scheduler(json.dumps(unthrottled), extra_args=gang_args).stop

        def extender_way(command: list[str], log: str) -> Any:
            """Start an extender (`command` + its port), then kube-scheduler configured to call it."""
            port = servers.free_port()
            process = subprocess.Popen([*command, str(port)], stdout=(work / log).open("ab"),
                                       stderr=subprocess.STDOUT)
            servers.eventually(lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60)
            verbs = {f"{verb}Verb": verb for verb in args.verbs.split(",")}
            profile = {**unthrottled, "profiles": [{"schedulerName": "default-scheduler"}], "extenders": [{
                "urlPrefix": f"http://127.0.0.1:{port}", **verbs, "weight": 1, "nodeCacheCapable": True,
                "enableHTTPS": False,
                "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]}]}
            scheduler = plane.start_scheduler(json.dumps(profile), extra_args=gang_args)
            return lambda: (scheduler.stop(), process.terminate(), process.wait(15))

        def with_extender() -> Any:
            return extender_way([sys.executable, "-m", "gpu_scheduler", "extender", "--config", str(config_file),
                                 "--kubeconfig", str(plane.kubeconfig), "--port"], "extender.log")

        def with_trivial_extender() -> Any:
            return extender_way([sys.executable, str(ROOT / "benchmarks" / "trivial_extender.py"),
                                 str(plane.kubeconfig)], "trivial.log")

        runs = {"a": ("ours", ours, "gpu-scheduler"), "b": ("kube", kube_scheduler, "default-scheduler"),
                "c": ("extender", with_extender, "default-scheduler"),
                "t": ("trivial", with_trivial_extender, "default-scheduler"), "f": ("floor", floor, "floor")}
        for workload in workloads:
            found = results.setdefault(workload, {})
            for round_number in range(1, args.rounds + 1):
                # alternate the order, so no way always runs first (a cold cache) or last (a warm, fuller etcd)
                for way in ways if round_number % 2 else ways[::-1]:
                    label, start, scheduler_name = runs[way]
                    found.setdefault(WAYS[way], []).append(run_way(
                        f"{label}-r{round_number}", api, args.nodes, args.pods, start, scheduler_name, args.timeout,
                        workload))
                print(f"{workload} round {round_number}: "
                      + ", ".join(f"{name} {rounds[-1]['pods_per_s']:.0f}" for name, rounds in found.items())
                      + " pods/s" + "".join(f"; {ratio} {values[-1]:.2f}" for ratio, values in _ratios(found).items()),
                      file=out, flush=True)
        print(f"logs: {work}", file=sys.stderr)
    summary: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "rounds": args.rounds,
                               "extender_verbs": args.verbs, "workloads": {}}
    for workload, found in results.items():
        summary["workloads"][workload] = {ratio: {"median": statistics.median(values), "rounds": values}
                                          for ratio, values in _ratios(found).items()}
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{args.nodes} nodes, {args.pods} pods a workload, created before the scheduler starts; medians of "
          f"{args.rounds} round(s), the ways alternating in order")
    print(f"{'workload':<18}{'way':<26}{'pods/s':>9}{'incl. start-up':>16}{'seconds':>9}   pods/s per round")
    for workload, found in results.items():
        for name, rounds in found.items():
            print(f"{workload:<18}{name:<26}{_median(rounds, 'pods_per_s'):>9.0f}"
                  f"{_median(rounds, 'pods_per_s_with_startup'):>16.0f}{_median(rounds, 'seconds'):>9.1f}   "
                  + " ".join(f"{r['pods_per_s']:.0f}" for r in rounds))
    print("pods/s: from the first binding (or eviction) seen to the last binding; incl. start-up: from the "
          "scheduler's start")
    ratios = {ratio for found in summary["workloads"].values() for ratio in found}
    if ratios:
        print(f"\n{'workload':<18}" + "".join(f"{ratio:>8}" for ratio in RATIOS if ratio in ratios))
        for workload, found in summary["workloads"].items():
            print(f"{workload:<18}" + "".join(f"{found[ratio]['median']:>8.2f}" if ratio in found else f"{'-':>8}"
                                              for ratio in RATIOS if ratio in ratios))
        print()
        for ratio in RATIOS:
            if ratio in ratios:
                print(f"{ratio} {TARGETS[ratio]}")
    return 0


def _ratios(results: dict[str, list[dict[str, float]]]) -> dict[str, list[float]]:
    """a/b, c/b, t/b, a/f, b/f per round, each against the other way's rate in the same round."""
    found = {}
    for ratio, (top, bottom) in RATIOS.items():
        if top in results and bottom in results:
            found[ratio] = [r["pods_per_s"] / b["pods_per_s"] for r, b in zip(results[top], results[bottom])]
    return found


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
