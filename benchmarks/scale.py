"""The largest GPU clusters on one apiserver: pods/s, peak memory and restart, ours beside kube-scheduler.

N fake 8-GPU nodes (default 15,000) in three zones and M one-GPU pods (default 30,000) on one control plane
(etcd + kube-apiserver; no controller manager, which nothing here needs). For each way, in a fresh namespace, with
the other scheduler stopped:

  (a) gpu-scheduler run   our standalone scheduler
  (b) kube-scheduler      the real one, default profile, client QPS limit lifted as in scheduler_perf

The pods are created first (nothing schedules them yet), then the scheduler starts. Figures:

  pods/s          from the first binding to the last (as scheduler_e2e.py), and from the scheduler's start
  peak RSS        the scheduler process's high-water mark of resident memory (VmHWM) at the end
  restart         with every pod bound, the scheduler stopped, one more pod created and the scheduler started
                  again: seconds until that pod is bound (the relist of N nodes and M pods, then one decision)

Targets (issue 35): a/b >= 1.0, peak RSS of ours <= kube-scheduler's, restart to first bind <= 30 s. A full run
takes about 11 min on the 2-core VM; `--nodes 1000 --pods 2000` checks the script in about 2 min.

    python benchmarks/scale.py [--nodes 15000] [--pods 30000] [--ways a,b] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import scheduler_e2e as e2e  # noqa: E402
from benchmarks import sides  # noqa: E402
from tests import servers  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402

UNTHROTTLED = {"clientConnection": {"qps": 5000, "burst": 5000}}


def peak_rss_mb(pid: int) -> float | None:
    """The process's high-water mark of resident memory (VmHWM), in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def one_pod(core: Any, namespace: str, name: str, scheduler_name: str) -> None:
    body = e2e.pod_body(0, scheduler_name, "basic")
    body["metadata"] = {"name": name}
    core.create_namespaced_pod(namespace, body)


def bound_after(core: Any, namespace: str, name: str, started: float, timeout: float) -> float:
    """Seconds from `started` until the pod is bound, read from a watch."""
    from kubernetes import watch

    deadline = started + timeout
    while time.perf_counter() < deadline:
        for event in watch.Watch().stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                                          timeout_seconds=max(1, int(deadline - time.perf_counter())),
                                          deserialize=False):
            if (event["object"].get("spec") or {}).get("nodeName"):
                return time.perf_counter() - started
    raise RuntimeError(f"{namespace}/{name} not bound {timeout:.0f} s after the restart")


Start = Callable[[], tuple[int, Callable[[], None]]]  # starts a scheduler: its PID, and how to stop it


def run_way(label: str, api: Any, start: Start, scheduler_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client
    from tqdm import tqdm

    core: Any = client.CoreV1Api(api)
    namespace = f"scale-{label}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    print(f"{label}: creating {args.pods} pods ...", file=sys.stderr, flush=True)
    e2e.create_pods(core, namespace, args.pods, scheduler_name)
    pid, stop = start()
    try:
        with tqdm(total=args.pods, desc=label, unit="pod", file=sys.stderr) as progress:
            elapsed, steady = e2e.wait_bound(core, namespace, args.pods, args.timeout, progress)
        rss = peak_rss_mb(pid)
    finally:
        stop()
    one_pod(core, namespace, "after-restart", scheduler_name)
    started = time.perf_counter()
    pid, stop = start()
    try:
        restart = bound_after(core, namespace, "after-restart", started, args.timeout)
        restart_rss = peak_rss_mb(pid)
    finally:
        stop()
    result = {"pods_per_s": steady, "pods_per_s_with_startup": args.pods / elapsed, "seconds": elapsed,
              "peak_rss_mb": rss, "restart_to_bind_s": restart, "restart_peak_rss_mb": restart_rss}
    print(f"{label}: {json.dumps(result)}; deleting the pods ...", file=sys.stderr, flush=True)
    e2e.delete_pods(core, namespace, args.timeout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--pods", type=int, default=30000)
    parser.add_argument("--ways", default="a,b", help="a (gpu-scheduler run), b (kube-scheduler)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per wait")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    if args.pods > args.nodes * 8:
        parser.error(f"--pods {args.pods}: {args.nodes} nodes hold {args.nodes * 8} one-GPU pods")
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text(e2e.CONFIG)
    results: dict[str, dict[str, Any]] = {}
    with cp.ControlPlane(controller_manager=False) as plane:
        api = plane.api_client()
        print(f"creating {args.nodes} nodes ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        e2e.create_nodes(api, args.nodes)
        print(f"  {time.perf_counter() - began:.0f} s", file=sys.stderr)

        def ours() -> tuple[int, Callable[[], None]]:
            process = subprocess.Popen(
                [sys.executable, "-m", "gpu_scheduler", "run", "--config", str(config_file), "--kubeconfig",
                 str(plane.kubeconfig), "--port", str(servers.free_port()), "--log-level", "warning"],
                stdout=(work / "run.log").open("ab"), stderr=subprocess.STDOUT, cwd=ROOT)
            return process.pid, lambda: servers.stop_process(process)

        def kube() -> tuple[int, Callable[[], None]]:
            scheduler = plane.start_scheduler(json.dumps(UNTHROTTLED), timeout=300)
            return scheduler.process.pid, scheduler.stop

        runs = {"a": ("gpu-scheduler", "ours", ours, "gpu-scheduler"),
                "b": ("kube-scheduler", "kube", kube, "default-scheduler")}
        for way in [w for w in "ab" if w in args.ways.split(",")]:
            name, label, starter, scheduler_name = runs[way]
            results[name] = run_way(label, api, starter, scheduler_name, args)
            r = results[name]
            print(f"{name}: {r['pods_per_s']:.0f} pods/s ({r['pods_per_s_with_startup']:.0f} with start-up), "
                  f"peak RSS {sides.fmt(r['peak_rss_mb'], 0)} MiB, restart to first bind "
                  f"{r['restart_to_bind_s']:.1f} s", file=sys.stderr, flush=True)
        print(f"logs: {work}", file=sys.stderr)
    ours_r, kube_r = results.get("gpu-scheduler"), results.get("kube-scheduler")
    summary: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods}
    if ours_r and kube_r:
        summary["a/b"] = ours_r["pods_per_s"] / kube_r["pods_per_s"]
        if ours_r["peak_rss_mb"] and kube_r["peak_rss_mb"]:
            summary["rss a/b"] = ours_r["peak_rss_mb"] / kube_r["peak_rss_mb"]
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{args.nodes} nodes x 8 GPUs, {args.pods} one-GPU pods created before the scheduler starts")
    print(f"{'way':<16}{'pods/s':>8}{'incl. start-up':>16}{'seconds':>9}{'peak RSS MiB':>14}{'restart to bind s':>19}")
    for name, r in results.items():
        print(f"{name:<16}{r['pods_per_s']:>8.0f}{r['pods_per_s_with_startup']:>16.0f}{r['seconds']:>9.0f}"
              f"{sides.fmt(r['peak_rss_mb'], 0):>14}{r['restart_to_bind_s']:>19.1f}")
    if "a/b" in summary:
        print(f"\na/b {summary['a/b']:.2f} (target >= 1.0)"
              + (f"; RSS a/b {summary['rss a/b']:.2f} (target <= 1.0)" if "rss a/b" in summary else "")
              + f"; restart to first bind {ours_r['restart_to_bind_s']:.1f} s (target <= 30 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
