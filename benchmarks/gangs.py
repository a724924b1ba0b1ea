"""Gang scheduling throughput on one real control plane: `gpu-scheduler run` beside kube-scheduler with its alpha
gang plugin (GangScheduling, v1.36), both placing the same Workload-API PodGroups.

The apiserver serves the alpha Workload API (scheduling.k8s.io/v1alpha2, feature gate GenericWorkload). N fake
8-GPU nodes (64 cores, 512Gi, 110 pods, in 3 zones). For each way, in a fresh namespace, with the other scheduler
stopped:

  (a) gpu-scheduler run   our standalone scheduler (schedulerName gpu-scheduler): one decision per gang
  (b) kube-scheduler      the real one, default profile plus `--feature-gates=GenericWorkload=true,GangScheduling=true`:
                          its pod-group cycle and Permit quorum (schedule_one_podgroup.go, gangscheduling.go)

G gangs (--groups, default 100) of M members (--members, 8) asking --gpus-per-member (8) GPUs each: one PodGroup
per gang (`spec.schedulingPolicy.gang.minCount: M`) created first, then every member at once (32 client threads),
gang after gang; each member names its PodGroup in `spec.schedulingGroup.podGroupName`. The clock runs from the first
member's creation until the API shows every member bound (counted from a watch). Figures:

  pods/s            members / seconds until the last was bound
  time to a gang    per gang, from its first member's creation to its last member's binding (median, p90)
  binding spread    per gang, from its first member's binding to its last's (median, max): how "at once" it lands
  partial gangs     gangs with some but not all members bound at the end (must be 0), and their GPUs

The ways run --rounds times, alternating their order; the figures are medians, and a/b is each round's rate of
ours over kube-scheduler's. Needs the binaries from `hack/control-plane.sh build`.

    python benchmarks/gangs.py [--nodes 1000] [--groups 100] [--members 8] [--rounds 1] [--ways a,b] [--json]
    python benchmarks/gangs.py --nodes 16 --groups 2          # a quick check, about 30 s
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import sides  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402

CONFIG = "schedulerName: gpu-scheduler\nadmission: {rules: [{name: any-gpu}]}\n"
GPU = cp.GPU_RESOURCE
WORKLOAD = ("scheduling.k8s.io", "v1alpha2")
UNTHROTTLED = {"clientConnection": {"qps": 5000, "burst": 5000}}  # as scheduler_perf and the other benchmarks


def create_nodes(api: Any, count: int, gpus: int) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda i: cp.create_gpu_node(api, f"bench-{i:05d}", gpus=gpus, zone=f"zone-{i % 3}"),
                      range(count)))


def member_body(group: int, index: int, gpus: int, scheduler_name: str) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"gang-{group:04d}-{index:02d}", "labels": {"bench": "gang", "gang": str(group)}},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "schedulingGroup": {"podGroupName": f"gang-{group:04d}"},
                     "containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10.1",
                                     "resources": {"requests": resources, "limits": resources}}]}}


def create_podgroups(api: Any, namespace: str, groups: int, members: int) -> None:
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda g: custom.create_namespaced_custom_object(
            *WORKLOAD, namespace, "podgroups",
            {"apiVersion": "/".join(WORKLOAD), "kind": "PodGroup", "metadata": {"name": f"gang-{g:04d}"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": members}}}}), range(groups)))


def create_and_watch(core: Any, namespace: str, bodies: list[dict[str, Any]], timeout: float,
                     desc: str) -> dict[str, Any]:
    """Create `bodies` at once (32 threads, in order) and follow the bindings on a watch opened before the first
    creation. Returns when each member was created and bound (seconds from the first creation)."""
    from kubernetes import watch
    from tqdm import tqdm

    listing = core.list_namespaced_pod(namespace, label_selector="bench=gang")
    names = {body["metadata"]["name"] for body in bodies}
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    errors: list[BaseException] = []
    started = time.perf_counter()

    def create(body: dict[str, Any]) -> None:
        at = time.perf_counter() - started
        core.create_namespaced_pod(namespace, body)
        created[body["metadata"]["name"]] = at

    def create_all() -> None:
        try:
            with ThreadPoolExecutor(max_workers=32) as pool:
                list(pool.map(create, bodies))
        except BaseException as error:  # noqa: BLE001 - reported by the waiting side
            errors.append(error)

    creator = threading.Thread(target=create_all, name="create", daemon=True)
    creator.start()
    deadline = started + timeout
    stream = watch.Watch()
    with tqdm(total=len(bodies), desc=desc, unit="pod", file=sys.stderr) as progress:
        version = listing.metadata.resource_version
        while len(bound) < len(bodies) and not errors and time.perf_counter() < deadline:
            left = max(1, int(deadline - time.perf_counter()))
            for event in stream.stream(core.list_namespaced_pod, namespace, label_selector="bench=gang",
                                       resource_version=version, timeout_seconds=min(left, 30), deserialize=False):
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                name = obj.get("metadata", {}).get("name")
                if name in names and name not in bound and (obj.get("spec") or {}).get("nodeName"):
                    bound[name] = time.perf_counter() - started
                    progress.update(1)
                    if len(bound) == len(bodies):
                        stream.stop()
                        break
    creator.join()
    if errors:
        raise errors[0]
    return {"created": created, "bound": bound}


def summarize(watched: dict[str, Any], groups: int, members: int, gpus: int) -> dict[str, Any]:
    created, bound = watched["created"], watched["bound"]
    by_gang: dict[str, list[str]] = defaultdict(list)
    for name in created:
        by_gang[name.rsplit("-", 1)[0]].append(name)
    whole = [names for names in by_gang.values() if all(n in bound for n in names)]
    partial = [names for names in by_gang.values() if any(n in bound for n in names) and not all(n in bound for n in names)]
    to_gang = sorted(max(bound[n] for n in names) - min(created[n] for n in names) for names in whole)
    spread = sorted(max(bound[n] for n in names) - min(bound[n] for n in names) for names in whole)
    total = groups * members
    seconds = max(bound.values()) if len(bound) == total else None
    return {"completed": seconds is not None, "seconds": seconds, "pods_per_s": total / seconds if seconds else None,
            "bound": len(bound), "whole_gangs": len(whole), "partial_gangs": len(partial),
            "partial_gpus": sum(gpus for names in partial for n in names if n in bound),
            "to_gang_median": statistics.median(to_gang) if to_gang else None,
            "to_gang_p90": to_gang[int(0.9 * (len(to_gang) - 1))] if to_gang else None,
            "spread_median": statistics.median(spread) if spread else None, "spread_max": max(spread, default=None)}


def run_way(label: str, api: Any, args: argparse.Namespace, start: Callable[[], Callable[[], None]],
            scheduler_name: str) -> dict[str, Any]:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    namespace = f"gangs-{label}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    create_podgroups(api, namespace, args.groups, args.members)
    bodies = [member_body(g, i, args.gpus_per_member, scheduler_name)
              for g in range(args.groups) for i in range(args.members)]
    stop = start()
    try:
        watched = create_and_watch(core, namespace, bodies, args.timeout, f"{label} gangs")
    finally:
        stop()
    result = summarize(watched, args.groups, args.members, args.gpus_per_member)
    # no namespace controller runs here: the members go one call, at once (no kubelet: grace period 0)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + args.timeout
    while core.list_namespaced_pod(namespace, limit=1).items and time.monotonic() < deadline:
        time.sleep(1)
    if not result["completed"]:
        print(f"{label}: only {result['bound']} of {len(bodies)} members bound after {args.timeout:.0f} s",
              file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--groups", type=int, default=100, help="gangs")
    parser.add_argument("--members", type=int, default=8, help="members per gang (its minCount)")
    parser.add_argument("--gpus-per-member", type=int, default=8)
    parser.add_argument("--ways", default="a,b", help="a (gpu-scheduler run), b (kube-scheduler, GangScheduling)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, the ways alternating; figures are medians")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per way and round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    if args.groups * args.members * args.gpus_per_member > args.nodes * args.gpus:
        parser.error("the gangs ask for more GPUs than the nodes have")
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gangs-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text(CONFIG)
    results: dict[str, list[dict[str, Any]]] = {}
    out = sys.stderr if args.json else sys.stdout
    with cp.ControlPlane(controller_manager=False, extra_apiserver_args=cp.WORKLOAD_API_ARGS) as plane:
        api = plane.api_client()
        print(f"creating {args.nodes} nodes ...", file=sys.stderr)
        create_nodes(api, args.nodes, args.gpus)

        def ours() -> Callable[[], None]:
            return sides.start_run(plane.kubeconfig, config_file, work / "run.log", nodes=args.nodes)

        def kube_scheduler() -> Callable[[], None]:
            return plane.start_scheduler(json.dumps(UNTHROTTLED), extra_args=cp.GANG_SCHEDULER_ARGS).stop

        runs = {"a": ("gpu-scheduler", "ours", ours, "gpu-scheduler"),
                "b": ("kube-scheduler", "kube", kube_scheduler, "default-scheduler")}
        chosen = [way for way in "ab" if way in set(args.ways.split(","))]
        for round_number in range(1, args.rounds + 1):
            order = chosen if round_number % 2 else chosen[::-1]
            for way in order:
                name, label, start, scheduler_name = runs[way]
                results.setdefault(name, []).append(run_way(f"{label}-r{round_number}", api, args, start,
                                                            scheduler_name))
            print(f"round {round_number}: " + "; ".join(f"{name} {_rate(rounds[-1])}"
                                                        for name, rounds in results.items())
                  + "".join(f"; a/b {ratio:.2f}" for ratio in sides.ratios(results, round_number)), file=out, flush=True)
        print(f"logs: {work} (gpu-scheduler run)", file=sys.stderr)
    ratios = sides.ratios(results)
    summary: dict[str, Any] = {"nodes": args.nodes, "gpus_per_node": args.gpus, "groups": args.groups,
                               "members": args.members, "gpus_per_member": args.gpus_per_member, "rounds": args.rounds}
    keys = ("to_gang_median", "to_gang_p90", "spread_median", "spread_max", "partial_gangs", "partial_gpus")
    for name, rounds in results.items():
        done = [r for r in rounds if r["completed"]]
        summary[name] = {"pods_per_s": statistics.median(r["pods_per_s"] for r in done) if done else None,
                         "completed_rounds": len(done),
                         **{key: statistics.median(v) if (v := [r[key] for r in rounds if r[key] is not None]) else None
                            for key in keys}}
    if ratios:
        summary["a/b"] = statistics.median(ratios)
        summary["a/b rounds"] = ratios
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{args.nodes} nodes x {args.gpus} GPUs; {args.groups} gangs of {args.members} members x "
          f"{args.gpus_per_member} GPUs (Workload-API PodGroups, minCount {args.members}), members created at once; "
          f"medians of {args.rounds} round(s)")
    print(f"{'way':<16}{'pods/s':>8}{'time to a gang (s)':>21}{'p90':>7}{'binding spread (s)':>21}{'max':>7}"
          f"{'partial gangs':>15}")
    for name in results:
        s = summary[name]
        print(f"{name:<16}{sides.fmt(s['pods_per_s'], 1):>8}{sides.fmt(s['to_gang_median'], 2):>21}{sides.fmt(s['to_gang_p90'], 2):>7}"
              f"{sides.fmt(s['spread_median'], 3):>21}{sides.fmt(s['spread_max'], 3):>7}{sides.fmt(s['partial_gangs'], 0):>15}")
    print("pods/s: members / seconds from the first creation until the API showed every member bound")
    print("time to a gang: from a gang's first member created to its last member bound; binding spread: from its "
          "first member bound to its last")
    if ratios:
        print(f"\na/b median {summary['a/b']:.2f} (gpu-scheduler run / kube-scheduler); rounds: "
              + " ".join(f"{value:.2f}" for value in ratios))
    return 0




def _rate(result: dict[str, Any]) -> str:
    return f"{result['pods_per_s']:.1f} pods/s" if result["completed"] else f"unfinished ({result['bound']} bound)"



if __name__ == "__main__":
    raise SystemExit(main())
