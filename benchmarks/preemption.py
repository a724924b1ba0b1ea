"""Priority preemption throughput on one real control plane: `gpu-scheduler run` beside kube-scheduler.

In the shape of upstream scheduler_perf's PreemptionBasic (misc/performance-config.yaml: 1000Nodes fills the
nodes with low-priority pods, then measures 1000 high-priority pods that can only be placed by preempting),
with GPUs. N fake 8-GPU nodes (64 cores, 512Gi, 110 pods) and two PriorityClasses made through the API
(`bench-low`, value 1, and `bench-high`, value 10; the Priority admission plugin sets each pod's priority from
its class). For each way, in a fresh namespace, with the other scheduler stopped:

  (a) gpu-scheduler run   our standalone scheduler (schedulerName gpu-scheduler)
  (b) kube-scheduler      the real one, default profile, nvidia.com/gpu as a plain extended resource

Fill (not timed): low-priority pods that take every GPU of every node, placed by that way's scheduler. With
`--fill mixed` (default), N x G/4 two-GPU and N x G/2 one-GPU pods interleaved (2, 1, 1, 2, 1, 1, ...) created at
once; a two-GPU pod the scheduler marks unschedulable (no node with two idle GPUs left) is deleted, and one-GPU
pods then take every GPU still idle. With `--fill sorted`, the two-GPU pods first, and once they are all bound
the one-GPU pods (the GPUs left are then even on every node, so they fit exactly); with `--fill uniform`,
N x G/2 two-GPU pods. Like upstream's low-priority template they have
terminationGracePeriodSeconds: 0: there is no kubelet, so a graceful delete would leave a bound victim
Terminating for ever; with 0 the apiserver deletes it at once. Then, until no pod changed and no Event was added
for --quiet (3) seconds: what the scheduler writes after its bindings (events; ours' devices records, which trail
the bindings) is done before the clock starts, as it would be for pods placed long ago.

Measure: M (--pods, default N, as 1000Nodes measures 1000) high-priority pods asking --high-gpus (4) GPUs each,
created at once (32 client threads); the clock runs from the first creation until the API shows every one bound
(counted from a watch). Then the scheduler is stopped and every pod on every node is read:

  victims per high-priority pod   low-priority pods gone (deleted, or being deleted) / M
  fragmented GPUs                 idle GPUs on nodes whose idle count is above 0 and below --high-gpus: room no
                                  high-priority pod can use; total, and averaged over all N nodes
  idle GPUs                       every idle GPU: the nodes were full, so each was evicted and left unused

The ways run --rounds times, alternating their order (runs on this machine differ by 15-30%); the figures are
medians, and a/b is each round's rate of ours over kube-scheduler's in the same round. Needs the binaries from
`hack/control-plane.sh build`.

    python benchmarks/preemption.py [--nodes 1000] [--pods N] [--rounds 1] [--ways a,b] [--json]
    python benchmarks/preemption.py --nodes 20 --pods 20      # a quick check, about 20 s
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import sides  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402

CONFIG = "schedulerName: gpu-scheduler\nadmission: {rules: [{name: any-gpu}]}\n"
GPU = cp.GPU_RESOURCE
LOW, HIGH = "bench-low", "bench-high"
PRIORITIES = {LOW: 1, HIGH: 10}
# kube-scheduler's client defaults to 50 QPS; scheduler_perf lifts the limit, and so does scheduler_e2e.py.
UNTHROTTLED = {"clientConnection": {"qps": 5000, "burst": 5000}}


def create_nodes(api: Any, count: int, gpus: int) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda i: cp.create_gpu_node(api, f"bench-{i:05d}", gpus=gpus, zone=f"zone-{i % 3}"),
                      range(count)))


def create_priority_classes(api: Any) -> None:
    from kubernetes import client

    scheduling: Any = client.SchedulingV1Api(api)
    for name, value in PRIORITIES.items():
        scheduling.create_priority_class({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
            "description": "benchmarks/preemption.py"})


def pod_body(name: str, tier: str, gpus: int, scheduler_name: str) -> dict[str, Any]:
    """A bare pod like upstream's pod-low-priority.yaml / pod-high-priority.yaml, asking for whole GPUs."""
    cpu, memory = ("100m", "100Mi") if tier == "low" else ("1", "500Mi")
    resources = {"cpu": cpu, "memory": memory, GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"tier": tier, "gpus": str(gpus)}},
            "spec": {"schedulerName": scheduler_name, "priorityClassName": LOW if tier == "low" else HIGH,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1",
                                     "resources": {"requests": resources, "limits": resources}}]}}


def create_and_wait(core: Any, namespace: str, bodies: list[dict[str, Any]], tier: str, desc: str,
                    timeout: float, *, settle: bool = False) -> dict[str, Any]:
    """Create `bodies` at once (32 threads) and wait until the API shows each bound; bindings are counted from a
    watch opened before the first creation. Returns seconds from the first creation to the last binding (None if
    not all were bound within `timeout`), to the last creation and to the first binding, and how many were bound.
    With `settle`, it also stops once every pod is either bound or marked unschedulable by the scheduler
    (PodScheduled False, reason Unschedulable), and returns the names of the latter."""
    from kubernetes import watch
    from tqdm import tqdm

    selector = f"tier={tier}"
    listing = core.list_namespaced_pod(namespace, label_selector=selector)
    names = {body["metadata"]["name"] for body in bodies}
    bound = {p.metadata.name for p in listing.items if p.spec.node_name and p.metadata.name in names}
    created: dict[str, float] = {}
    errors: list[BaseException] = []
    started = time.perf_counter()

    def create_all() -> None:
        try:
            with ThreadPoolExecutor(max_workers=32) as pool:
                list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
            created["at"] = time.perf_counter() - started
        except BaseException as error:  # noqa: BLE001 - reported by the waiting side
            errors.append(error)

    creator = threading.Thread(target=create_all, name="create", daemon=True)
    creator.start()
    deadline = started + timeout
    stream = watch.Watch()
    done_at: float | None = None
    first: float | None = None
    unschedulable: set[str] = set()
    with tqdm(total=len(bodies), desc=desc, unit="pod", file=sys.stderr) as progress:
        progress.update(len(bound))
        version = listing.metadata.resource_version
        while done_at is None and not errors and time.perf_counter() < deadline:
            left = max(1, int(deadline - time.perf_counter()))
            for event in stream.stream(core.list_namespaced_pod, namespace, label_selector=selector,
                                       resource_version=version, timeout_seconds=min(left, 30),
                                       deserialize=False):
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                name = obj.get("metadata", {}).get("name")
                if name not in names or name in bound:
                    continue
                if (obj.get("spec") or {}).get("nodeName"):
                    bound.add(name)
                    unschedulable.discard(name)
                    progress.update(1)
                    first = first or time.perf_counter() - started
                elif settle and any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                    and c.get("reason") == "Unschedulable"
                                    for c in (obj.get("status") or {}).get("conditions") or ()):
                    unschedulable.add(name)
                if len(bound) + len(unschedulable) == len(bodies):
                    done_at = time.perf_counter() - started
                    stream.stop()
                    break
    creator.join()
    if errors:
        raise errors[0]
    return {"seconds": done_at if len(bound) == len(bodies) else None, "create_seconds": created.get("at"),
            "first_bound_seconds": first, "bound": len(bound), "unschedulable": sorted(unschedulable)}


def read_nodes(core: Any, nodes: int, gpus: int, high_gpus: int) -> dict[str, Any]:
    """Every pod on every node, after the measure: GPUs in use per node (pods being deleted left out) and the
    low-priority pods still there."""
    used: Counter[str] = Counter()
    mixes: dict[str, Counter[str]] = {}
    low_left = high_bound = terminating = 0
    for pod in core.list_pod_for_all_namespaces(label_selector="tier").items:
        if pod.metadata.deletion_timestamp is not None:
            terminating += 1
            continue
        labels = pod.metadata.labels
        if labels.get("tier") == "low":
            low_left += 1
        if not pod.spec.node_name:
            continue
        high_bound += labels.get("tier") == "high"
        used[pod.spec.node_name] += sum(int((c.resources.requests or {}).get(GPU, 0)) for c in pod.spec.containers)
        shape = f"{labels['gpus']}{'h' if labels.get('tier') == 'high' else ''}"
        mixes.setdefault(pod.spec.node_name, Counter())[shape] += 1
    idle = [gpus - used.get(f"bench-{i:05d}", 0) for i in range(nodes)]
    stranded = [n for n in idle if 0 < n < high_gpus]
    return {"low_left": low_left, "high_bound": high_bound, "terminating": terminating,
            "idle_gpus": sum(idle), "fragmented_gpus": sum(stranded), "fragmented_nodes": len(stranded),
            "fragmented_per_node": sum(stranded) / nodes if nodes else 0.0,
            "idle_histogram": {str(k): v for k, v in sorted(Counter(idle).items())},
            "final_layout": _mixes(mixes.values())}


def fill_layout(core: Any, namespace: str) -> tuple[dict[str, int], int]:
    """How many nodes got each mix of pods in the fill ({"2x2+4x1": 1000}: two 2-GPU and four 1-GPU pods on each of
    1000 nodes), and how many low-priority pods are bound."""
    per_node: dict[str, Counter[str]] = {}
    for pod in core.list_namespaced_pod(namespace, label_selector="tier=low").items:
        if pod.spec.node_name and pod.metadata.deletion_timestamp is None:
            per_node.setdefault(pod.spec.node_name, Counter())[pod.metadata.labels["gpus"]] += 1
    return _mixes(per_node.values()), sum(sum(c.values()) for c in per_node.values())


def _mixes(nodes: Any) -> dict[str, int]:
    """How many nodes hold each mix of pods, most common first: {"2x4h+2x2": 10} is ten nodes with two high-priority
    4-GPU pods and two low-priority 2-GPU pods each."""
    return dict(Counter("+".join(f"{c[shape]}x{shape}" for shape in sorted(c, key=lambda s: (-int(s.rstrip("h")), s)))
                        for c in nodes).most_common())


def wait_quiet(core: Any, namespace: str, quiet: float, timeout: float) -> float:
    """Wait until neither a pod of the namespace changes nor an Event is added to it for `quiet` seconds: what a
    scheduler writes after binding (kube-scheduler's `Scheduled` events; ours' events and devices records, which
    trail the bindings) is done before the clock starts, as it would be for pods placed long ago. Returns the
    seconds waited."""
    import urllib3
    from kubernetes import watch

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        events = _count_events(core, namespace)
        version = core.list_namespaced_pod(namespace, limit=1).metadata.resource_version
        try:
            for _ in watch.Watch().stream(core.list_namespaced_pod, namespace, resource_version=version,
                                          deserialize=False, _request_timeout=(10, quiet)):
                break  # a pod changed: not quiet yet
            else:
                continue
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            if _count_events(core, namespace) == events:
                return time.monotonic() - started
            continue
        time.sleep(0.5)
    return time.monotonic() - started


def _count_events(core: Any, namespace: str) -> int:
    listing = core.list_namespaced_event(namespace, limit=1)
    return len(listing.items) + (listing.metadata.remaining_item_count or 0)


def clear_namespace(core: Any, namespace: str) -> None:
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while core.list_namespaced_pod(namespace, limit=1).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{namespace}: pods still there 120 s after deleting them")
        time.sleep(0.5)


def fill(core: Any, namespace: str, args: argparse.Namespace, scheduler_name: str, label: str) -> None:
    """Low-priority pods on every GPU of every node, placed by the way's scheduler (see --fill)."""
    twos, ones = (args.nodes * args.gpus // 4, args.nodes * args.gpus // 2) if args.fill != "uniform" \
        else (args.nodes * args.gpus // 2, 0)
    body = lambda size, i: pod_body(f"low-{size}g-{i}", "low", size, scheduler_name)  # noqa: E731
    if args.fill == "mixed":
        # one two-GPU pod, then two one-GPU pods, and so on: a two-GPU pod that finds no two idle GPUs on one node
        # is left pending; those are deleted, and one-GPU pods then take every GPU still idle
        sizes = [2, 1, 1] * twos
        counters = Counter[int]()
        bodies = []
        for size in sizes[:twos + ones]:
            bodies.append(body(size, counters[size]))
            counters[size] += 1
        outcome = create_and_wait(core, namespace, bodies, "low", f"{label} fill 2+1-GPU", args.timeout, settle=True)
        for name in outcome["unschedulable"]:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        used = Counter[str]()
        for pod in core.list_namespaced_pod(namespace, label_selector="tier=low").items:
            if pod.spec.node_name and pod.metadata.deletion_timestamp is None:
                used[pod.spec.node_name] += int(pod.metadata.labels["gpus"])
        idle = args.nodes * args.gpus - sum(used.values())
        steps = [[body(1, counters[1] + i) for i in range(idle)]] if idle else []
    else:
        steps = [[body(2, i) for i in range(twos)], [body(1, i) for i in range(ones)]]
    for bodies in filter(None, steps):
        size = bodies[0]["metadata"]["labels"]["gpus"]
        outcome = create_and_wait(core, namespace, bodies, "low", f"{label} fill {size}-GPU", args.timeout)
        if outcome["seconds"] is None:
            raise RuntimeError(f"{label}: fill: {len(bodies) - outcome['bound']} of {len(bodies)} {size}-GPU pods "
                               f"still unbound after {args.timeout:.0f} s")


def run_way(label: str, core: Any, args: argparse.Namespace, start: Callable[[], Callable[[], None]],
            scheduler_name: str) -> dict[str, Any]:
    namespace = f"preempt-{label}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    stop = start()
    try:
        fill_started = time.perf_counter()
        fill(core, namespace, args, scheduler_name, label)
        fill_seconds = time.perf_counter() - fill_started
        print(f"{label}: waiting until the fill's events and records are written (nothing new for {args.quiet:.0f} s)",
              file=sys.stderr)
        quiet_seconds = wait_quiet(core, namespace, args.quiet, args.timeout)
        layout, low_pods = fill_layout(core, namespace)
        bodies = [pod_body(f"high-{i}", "high", args.high_gpus, scheduler_name) for i in range(args.pods)]
        measured = create_and_wait(core, namespace, bodies, "high", f"{label} preempt", args.timeout)
    finally:
        stop()
    state = read_nodes(core, args.nodes, args.gpus, args.high_gpus)
    clear_namespace(core, namespace)
    seconds = measured["seconds"]
    victims = low_pods - state["low_left"]
    result = {"completed": seconds is not None, "seconds": seconds,
              "pods_per_s": args.pods / seconds if seconds else None, "high_bound": measured["bound"],
              "create_seconds": measured["create_seconds"], "first_bound_seconds": measured["first_bound_seconds"],
              "fill_seconds": fill_seconds, "quiet_seconds": quiet_seconds, "low_pods": low_pods,
              "fill_layout": layout, "victims": victims, "victims_per_pod": victims / args.pods, **state}
    if seconds is None:
        print(f"{label}: only {measured['bound']} of {args.pods} high-priority pods bound after "
              f"{args.timeout:.0f} s", file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=None, help="high-priority pods (default: as many as nodes)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (a multiple of 4)")
    parser.add_argument("--high-gpus", type=int, default=4, help="GPUs each high-priority pod asks for")
    parser.add_argument("--fill", choices=("mixed", "sorted", "uniform"), default="mixed",
                        help="mixed: 2-GPU and 1-GPU pods interleaved, then 1-GPU pods on any GPU left; sorted: 2-GPU "
                             "pods on half the GPUs, once bound 1-GPU pods on the rest; uniform: 2-GPU pods only")
    parser.add_argument("--ways", default="a,b", help="a (gpu-scheduler run), b (kube-scheduler)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the ways this many times, alternating their order; figures are medians")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per phase (fill step, measure), seconds")
    parser.add_argument("--quiet", type=float, default=3.0,
                        help="before the measure, wait until no pod changed and no Event was added for this long")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    args.pods = args.nodes if args.pods is None else args.pods
    if args.gpus % 4 or args.gpus <= 0:
        parser.error("--gpus must be a positive multiple of 4")
    if args.pods * args.high_gpus > args.nodes * args.gpus:
        parser.error("the high-priority pods ask for more GPUs than the nodes have")
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    from kubernetes import client

    work = Path(tempfile.mkdtemp(prefix="preemption-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text(CONFIG)
    results: dict[str, list[dict[str, Any]]] = {}
    out = sys.stderr if args.json else sys.stdout
    with cp.ControlPlane(controller_manager=False) as plane:
        api = plane.api_client()
        core: Any = client.CoreV1Api(api)
        print(f"creating {args.nodes} nodes ...", file=sys.stderr)
        create_nodes(api, args.nodes, args.gpus)
        create_priority_classes(api)

        def ours() -> Callable[[], None]:
            return sides.start_run(plane.kubeconfig, config_file, work / "run.log")

        def kube_scheduler() -> Callable[[], None]:
            return plane.start_scheduler(json.dumps(UNTHROTTLED)).stop

        runs = {"a": ("gpu-scheduler", "ours", ours, "gpu-scheduler"),
                "b": ("kube-scheduler", "kube", kube_scheduler, "default-scheduler")}
        chosen = [way for way in "ab" if way in set(args.ways.split(","))]
        for round_number in range(1, args.rounds + 1):
            order = chosen if round_number % 2 else chosen[::-1]  # no way always first (cold) or last (fuller etcd)
            for way in order:
                name, label, start, scheduler_name = runs[way]
                results.setdefault(name, []).append(
                    run_way(f"{label}-r{round_number}", core, args, start, scheduler_name))
            print(f"round {round_number}: " + "; ".join(
                f"{name} {_rate(rounds[-1])}, {rounds[-1]['victims_per_pod']:.2f} victims/pod, "
                f"{rounds[-1]['fragmented_gpus']} fragmented GPUs" for name, rounds in results.items())
                + "".join(f"; a/b {ratio:.2f}" for ratio in sides.ratios(results, round_number)), file=out, flush=True)
        print(f"logs: {work} (gpu-scheduler run), kube-scheduler's are removed with the control plane",
              file=sys.stderr)
    ratios = sides.ratios(results)
    summary: dict[str, Any] = {"nodes": args.nodes, "gpus_per_node": args.gpus, "high_pods": args.pods,
                               "high_gpus": args.high_gpus, "fill": args.fill, "rounds": args.rounds}
    for name, rounds in results.items():
        done = [r for r in rounds if r["completed"]]
        summary[name] = {"pods_per_s": statistics.median(r["pods_per_s"] for r in done) if done else None,
                         "completed_rounds": len(done),
                         **{key: statistics.median(r[key] for r in rounds)
                            for key in ("victims_per_pod", "fragmented_gpus", "fragmented_per_node", "idle_gpus")}}
    if ratios:
        summary["a/b"] = statistics.median(ratios)
        summary["a/b rounds"] = ratios
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    low = {"mixed": "two-GPU and one-GPU (interleaved, then one-GPU on any GPU left)",
           "sorted": "two-GPU (half the GPUs), then one-GPU", "uniform": "two-GPU"}[args.fill]
    print(f"\n{args.nodes} nodes x {args.gpus} GPUs filled by {low} low-priority pods (priority 1); "
          f"{args.pods} high-priority pods (priority 10) of {args.high_gpus} GPUs created at once; "
          f"medians of {args.rounds} round(s), the ways alternating in order")
    print(f"{'way':<16}{'pods/s':>8}{'seconds':>9}{'victims/pod':>13}{'fragmented GPUs':>17}{'per node':>10}"
          f"{'idle GPUs':>11}   pods/s per round")
    for name, rounds in results.items():
        s = summary[name]
        seconds = [r["seconds"] for r in rounds if r["completed"]]
        print(f"{name:<16}{sides.fmt(s['pods_per_s'], 0):>8}{sides.fmt(statistics.median(seconds) if seconds else None, 1):>9}"
              f"{s['victims_per_pod']:>13.2f}{s['fragmented_gpus']:>17.0f}{s['fragmented_per_node']:>10.3f}"
              f"{s['idle_gpus']:>11.0f}   " + ", ".join(_rate(r).removesuffix(" pods/s") for r in rounds))
    for name, rounds in results.items():
        print(f"{name} fill, round 1: {rounds[0]['low_pods']} low-priority pods; nodes per mix (count x GPUs): "
              + ", ".join(f"{mix} {nodes}" for mix, nodes in rounds[0]["fill_layout"].items()))
        print(f"{name} after the measure, round 1 ({args.high_gpus}h: a high-priority pod): "
              + ", ".join(f"{mix} {nodes}" for mix, nodes in rounds[0]["final_layout"].items()))
    print("pods/s: high-priority pods / seconds from the first creation until the API showed every one bound")
    print("victims/pod: low-priority pods deleted / high-priority pods")
    print(f"fragmented GPUs: idle GPUs on nodes with 1-{args.high_gpus - 1} idle (room no {args.high_gpus}-GPU pod "
          f"can use), once the last high-priority pod was bound (or the wait gave up) and the scheduler stopped; "
          f"per node: averaged over all {args.nodes} nodes; idle GPUs: all idle GPUs then")
    if ratios:
        print(f"\na/b median {summary['a/b']:.2f} (gpu-scheduler run / kube-scheduler); rounds: "
              + " ".join(f"{value:.2f}" for value in ratios))
    return 0



def _rate(result: dict[str, Any]) -> str:
    return (f"{result['pods_per_s']:.0f} pods/s" if result["completed"]
            else f"unfinished ({result['high_bound']} bound)")



if __name__ == "__main__":
    raise SystemExit(main())
