"""End-to-end scheduling throughput on one real control plane, three ways side by side.

N fake GPU nodes (default 1000, 8 GPUs each) and M one-GPU pods. For each way the pods are
created first (nothing schedules them yet), then the scheduler starts, and the clock runs
until the API shows every pod bound:

  (a) gpu-scheduler run             our standalone scheduler
  (b) kube-scheduler                the real one, default profile, nvidia.com/gpu as a plain extended resource
  (c) kube-scheduler + extender     the real one calling `gpu-scheduler extender` (filter, prioritize, bind)
  (t) kube-scheduler + trivial      the same, calling benchmarks/trivial_extender.py: the ceiling of any
                                    extender served this way on this machine

Runs the ways --rounds times (default 3), alternating their order, since runs on this machine differ
by 15-30%; prints each round and the medians of pods/s and of the ratios a/b, c/b and t/b (each
round's against kube-scheduler's rate in the same round). Targets: a/b >= 1.0; c/b >= 0.5 (a trivial
HTTP extender measured upstream kept about 0.11). Needs the binaries from `hack/control-plane.sh build`.

    python benchmarks/scheduler_e2e.py [--nodes 1000] [--pods 2000] [--rounds 3] [--json]
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

from benchmarks import sides  # noqa: E402
from tests import servers  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402

CONFIG = "schedulerName: gpu-scheduler\nadmission: {rules: [{name: any-gpu}]}\n"


def create_nodes(api: Any, count: int) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda i: cp.create_gpu_node(api, f"bench-{i:05d}", gpus=8, zone=f"zone-{i % 3}"),
                      range(count)))


GROUP = 3  # pods per application group in the constraint workloads
WORKLOADS = ("basic", "anti-affinity", "affinity", "spread", "preferred-spread")


def pod_body(i: int, scheduler_name: str, workload: str) -> dict[str, Any]:
    """One one-GPU pod; in the constraint workloads (after upstream scheduler_perf's SchedulingPodAntiAffinity,
    SchedulingPodAffinity, TopologySpreading, PreferredTopologySpreading) it belongs to a group of GROUP pods
    that wants one pod per node, one zone, or an even spread over the zones."""
    spec: dict[str, Any] = {"schedulerName": scheduler_name, "containers": [{
        "name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    group = {"app": f"g{i // GROUP}"}
    if workload == "anti-affinity":
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


def create_pods(core: Any, namespace: str, count: int, scheduler_name: str, workload: str = "basic") -> float:
    body = lambda i: pod_body(i, scheduler_name, workload)  # noqa: E731
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(namespace, body(i)), range(count)))
    return count / (time.perf_counter() - started)


def wait_bound(core: Any, namespace: str, count: int, timeout: float, progress: Any) -> tuple[float, float]:
    """(seconds from scheduler start until every pod is bound, pods/s from the first binding seen to the last).

    Bindings are counted from a watch, not by polling lists, which would load the apiserver all
    the schedulers share. The second figure leaves out start-up (process start, imports, initial
    list), as upstream's scheduler_perf throughput does.
    """
    from kubernetes import watch

    started = time.perf_counter()
    deadline = started + timeout
    bound: set[str] = set()
    first: tuple[float, int] | None = None
    while time.perf_counter() < deadline:  # a watch the apiserver ends early is listed and watched again
        listing = core.list_namespaced_pod(namespace)
        newly = {p.metadata.name for p in listing.items if p.spec.node_name} - bound
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
            if (obj.get("spec") or {}).get("nodeName") and obj["metadata"]["name"] not in bound:
                bound.add(obj["metadata"]["name"])
                progress.update(1)
                now = time.perf_counter()
                if first is None:
                    first = (now, len(bound))
                if len(bound) == count:
                    stream.stop()
                    steady = (count - first[1]) / (now - first[0]) if now > first[0] else float("inf")
                    return now - started, steady
    raise RuntimeError(f"{namespace}: {count - len(bound)} of {count} pods still unbound after {timeout:.0f}s")


def run_way(name: str, plane: cp.ControlPlane, api: Any, pods: int, work: Path, start: Any, scheduler_name: str,
            timeout: float, workload: str = "basic") -> dict[str, float]:
    from kubernetes import client
    from tqdm import tqdm

    core: Any = client.CoreV1Api(api)
    namespace = f"bench-{name}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    create_rate = create_pods(core, namespace, pods, scheduler_name, workload)
    stop = start()
    try:
        with tqdm(total=pods, desc=name, unit="pod") as progress:
            elapsed, steady = wait_bound(core, namespace, pods, timeout, progress)
    finally:
        stop()
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    return {"pods_per_s": steady, "seconds": elapsed, "pods_per_s_with_startup": pods / elapsed,
            "create_pods_per_s": create_rate}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600.0, help="per way, seconds")
    parser.add_argument("--ways", default="a,b,c,t",
                        help="which of a (ours), b (kube-scheduler), c (our extender), t (trivial extender)")
    parser.add_argument("--verbs", default="filter,prioritize,bind",
                        help="the extender verbs kube-scheduler calls in c and t (without bind, it binds itself): "
                             "shows what each round trip costs")
    parser.add_argument("--workload", choices=WORKLOADS, default="basic",
                        help=f"the pods' constraints: none, or groups of {GROUP} with required anti-affinity per node, "
                             "required affinity to their zone, a DoNotSchedule or a ScheduleAnyway zone spread")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run the ways this many times, alternating their order; figures are medians")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    ways = set(args.ways.split(","))
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="scheduler-e2e-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text(CONFIG)
    results: dict[str, list[dict[str, float]]] = {}  # way -> one result per round
    with cp.ControlPlane() as plane:
        api = plane.api_client()
        print(f"creating {args.nodes} nodes ...", file=sys.stderr)
        create_nodes(api, args.nodes)

        def ours() -> Any:
            process = subprocess.Popen(
                [sys.executable, "-m", "gpu_scheduler", "run", "--config", str(config_file), "--kubeconfig",
                 str(plane.kubeconfig), "--port", str(servers.free_port()), "--log-level", "warning"],
                stdout=(work / "run.log").open("wb"), stderr=subprocess.STDOUT)
            return lambda: (process.terminate(), process.wait(15))

        # kube-scheduler's client defaults to 50 QPS, which alone would cap it at 50 bindings/s;
        # scheduler_perf lifts the limit, and so does this benchmark.
        unthrottled = {"clientConnection": {"qps": 5000, "burst": 5000}}

        def kube_scheduler() -> Any:
            return plane.start_scheduler(json.dumps(unthrottled)).stop

        def extender_way(command: list[str], log: str) -> Any:
            """Start an extender (`command` + its port), then kube-scheduler configured to call it."""
            port = servers.free_port()
            process = subprocess.Popen([*command, str(port)], stdout=(work / log).open("wb"),
                                       stderr=subprocess.STDOUT)
            servers.eventually(lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60)
            verbs = {f"{verb}Verb": verb for verb in args.verbs.split(",")}
            profile = {**unthrottled, "profiles": [{"schedulerName": "default-scheduler"}], "extenders": [{
                "urlPrefix": f"http://127.0.0.1:{port}", **verbs, "weight": 1, "nodeCacheCapable": True,
                "enableHTTPS": False,
                "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]}]}
            scheduler = plane.start_scheduler(json.dumps(profile))
            return lambda: (scheduler.stop(), process.terminate(), process.wait(15))

        def with_extender() -> Any:
            return extender_way([sys.executable, "-m", "gpu_scheduler", "extender", "--config", str(config_file),
                                 "--kubeconfig", str(plane.kubeconfig), "--port"], "extender.log")

        def with_trivial_extender() -> Any:
            return extender_way([sys.executable, str(ROOT / "benchmarks" / "trivial_extender.py"),
                                 str(plane.kubeconfig)], "trivial.log")

        runs = {"a": ("gpu-scheduler", "ours", ours, "gpu-scheduler"),
                "b": ("kube-scheduler", "kube", kube_scheduler, "default-scheduler"),
                "c": ("kube-scheduler+extender", "extender", with_extender, "default-scheduler"),
                "t": ("kube-scheduler+trivial", "trivial", with_trivial_extender, "default-scheduler")}
        chosen = [way for way in "abct" if way in ways]
        for round_number in range(1, args.rounds + 1):
            # alternate the order, so no way always runs first (a cold cache) or last (a warm, fuller etcd)
            order = chosen if round_number % 2 else chosen[::-1]
            for way in order:
                name, label, start, scheduler_name = runs[way]
                results.setdefault(name, []).append(run_way(f"{label}-r{round_number}", plane,
                                                            api, args.pods, work, start, scheduler_name,
                                                            args.timeout, args.workload))
            print(f"round {round_number}: " + ", ".join(f"{name} {rounds[-1]['pods_per_s']:.0f}"
                                                        for name, rounds in results.items())
                  + " pods/s" + "".join(f"; {ratio} {values[-1]:.2f}" for ratio, values in _ratios(results).items()),
                  file=sys.stderr if args.json else sys.stdout, flush=True)
    ratios = _ratios(results)
    summary: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "workload": args.workload,
                               "rounds": args.rounds, "extender_verbs": args.verbs}
    for ratio, values in ratios.items():
        summary[ratio] = statistics.median(values)
        summary[f"{ratio} rounds"] = values
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{args.nodes} nodes, {args.pods} one-GPU pods ({args.workload}), created before the scheduler starts; "
          f"medians of {args.rounds} round(s), the ways alternating in order")
    print(f"{'way':<26}{'pods/s':>9}{'incl. start-up':>16}{'seconds':>9}   pods/s per round")
    for name, rounds in results.items():
        print(f"{name:<26}{_median(rounds, 'pods_per_s'):>9.0f}{_median(rounds, 'pods_per_s_with_startup'):>16.0f}"
              f"{_median(rounds, 'seconds'):>9.1f}   " + " ".join(f"{r['pods_per_s']:.0f}" for r in rounds))
    print("pods/s: from the first binding seen to the last; incl. start-up: from the scheduler's start")
    targets = {"a/b": "(gpu-scheduler run / kube-scheduler), target >= 1.0",
               "c/b": "(kube-scheduler with our extender / kube-scheduler), target >= 0.5",
               "t/b": "(kube-scheduler with a trivial Python extender / kube-scheduler), the ceiling for an "
                      "extender served this way"}
    print()
    for ratio, values in ratios.items():
        print(f"{ratio} median {summary[ratio]:.2f} {targets[ratio]}; rounds: "
              + " ".join(f"{value:.2f}" for value in values))
    return 0


def _ratios(results: dict[str, list[dict[str, float]]]) -> dict[str, list[float]]:
    """a/b, c/b, t/b per round, each against kube-scheduler's rate of the same round."""
    base = results.get("kube-scheduler") or []
    found = {}
    for ratio, name in (("a/b", "gpu-scheduler"), ("c/b", "kube-scheduler+extender"),
                        ("t/b", "kube-scheduler+trivial")):
        if base and name in results:
            found[ratio] = [r["pods_per_s"] / b["pods_per_s"] for r, b in zip(results[name], base)]
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
