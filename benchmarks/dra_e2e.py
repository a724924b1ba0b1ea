"""DRA scheduling throughput on one real control plane: `gpu-scheduler run` beside kube-scheduler v1.36.3.

N fake nodes (default 1000) without `nvidia.com/gpu`, each publishing 8 GPUs in a ResourceSlice as NVIDIA's DRA
driver does, one DeviceClass, and M pods (default 2000) each with a claim from a ResourceClaimTemplate asking for
one GPU. kube-controller-manager's resourceclaim controller makes each pod's claim; once every claim exists the
scheduler starts, and the clock runs until the API shows every pod bound. Binding a DRA pod takes more writes than
binding a device-plugin pod: the claim's finalizer, its allocation and reservation, then the Binding.

  (a) gpu-scheduler run     our standalone scheduler (allocation, PreBind writes, Binding)
  (b) kube-scheduler        the real one, default profile (its DynamicResources plugin), client QPS unthrottled

With --extended the pods are written for the device plugin instead (`nvidia.com/gpu: 1`, no claim) and the
DeviceClass names `nvidia.com/gpu` as its extended resource: each scheduler makes the pod's claim itself in PreBind
(create, allocation and reservation, the pod's extendedResourceClaimStatus), as kube-scheduler v1.36 does.

Runs the ways --rounds times, alternating their order (runs on this machine differ by 15-30%), deleting each way's
pods and waiting for their claims to go before the next; prints each round and the median ratio a/b (target >= 1.0).
Needs the binaries from `hack/control-plane.sh build`.

    python benchmarks/dra_e2e.py [--nodes 1000] [--pods 2000] [--rounds 3] [--extended] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import sides  # noqa: E402
from benchmarks.scheduler_e2e import wait_bound  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402
from tests.e2e.standins import DRA_DRIVER as DRIVER  # noqa: E402
from tests.e2e.standins import gpu_slice  # noqa: E402

CLASS = "gpu.nvidia.com"


def create_cluster(api: Any, count: int, *, extended: bool = False) -> None:
    from kubernetes import client

    resource: Any = client.ResourceV1Api(api)
    spec: dict[str, Any] = {"selectors": [{"cel": {
        "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]}
    if extended:
        spec["extendedResourceName"] = "nvidia.com/gpu"
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": CLASS}, "spec": spec})

    def node(i: int) -> None:
        name = f"bench-{i:05d}"
        cp.create_gpu_node(api, name, gpus=0, zone=f"zone-{i % 3}")
        resource.create_resource_slice(gpu_slice(name))
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(node, range(count)))


def create_pods(api: Any, namespace: str, count: int, scheduler_name: str, *, extended: bool = False) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if extended:
        plain = lambda i: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}"},  # noqa: E731
                           "spec": {"schedulerName": scheduler_name, "containers": [{
                               "name": "main", "image": "registry.invalid/cuda:12",
                               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(lambda i: core.create_namespaced_pod(namespace, plain(i)), range(count)))
        return
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}}})
    body = lambda i: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}"},  # noqa: E731
                      "spec": {"schedulerName": scheduler_name,
                               "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                               "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                                               "resources": {"claims": [{"name": "gpu"}]}}]}}
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(namespace, body(i)), range(count)))


def claims_in(api: Any, namespace: str) -> int:
    from kubernetes import client

    return len(client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items)


def wait_claims(api: Any, namespace: str, count: int, timeout: float) -> None:
    """Until the resourceclaim controller has made (or, after the pods went, removed) the claims."""
    deadline = time.monotonic() + timeout
    while (found := claims_in(api, namespace)) != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{namespace}: {found} claims after {timeout:.0f}s, expected {count}")
        time.sleep(1)


def run_way(label: str, api: Any, pods: int, start: Any, scheduler_name: str, timeout: float, *,
            extended: bool = False) -> dict[str, float]:
    from kubernetes import client
    from tqdm import tqdm

    core: Any = client.CoreV1Api(api)
    namespace = f"bench-dra-{label}"
    create_pods(api, namespace, pods, scheduler_name, extended=extended)
    if not extended:
        wait_claims(api, namespace, pods, timeout)
    stop = start()
    try:
        with tqdm(total=pods, desc=label, unit="pod") as progress:
            elapsed, steady = wait_bound(core, namespace, pods, timeout, progress)
    finally:
        stop()
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_claims(api, namespace, 0, timeout)  # their devices are free again for the next way
    return {"pods_per_s": steady, "seconds": elapsed, "pods_per_s_with_startup": pods / elapsed, "completed": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="the ways this many times, alternating their order")
    parser.add_argument("--timeout", type=float, default=900.0, help="per way, seconds")
    parser.add_argument("--extended", action="store_true",
                        help="pods ask nvidia.com/gpu, which the DeviceClass serves (the scheduler makes the claims)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    if args.pods > args.nodes * 8:
        print(f"--pods {args.pods} exceeds the {args.nodes * 8} GPUs of --nodes {args.nodes}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dra-e2e-bench-"))
    config_file = work / "config.yaml"
    config_file.write_text("schedulerName: gpu-scheduler\n")
    results: dict[str, list[dict[str, float]]] = {"gpu-scheduler": [], "kube-scheduler": []}
    with cp.ControlPlane() as plane:
        api = plane.api_client()
        print(f"creating {args.nodes} nodes and their ResourceSlices ...", file=sys.stderr)
        create_cluster(api, args.nodes, extended=args.extended)

        def ours() -> Any:
            return sides.start_run(plane.kubeconfig, config_file, work / "run.log")

        def kube_scheduler() -> Any:
            return plane.start_scheduler(json.dumps({"clientConnection": {"qps": 5000, "burst": 5000}})).stop

        ways = [("gpu-scheduler", "ours", ours, "gpu-scheduler"), ("kube-scheduler", "kube", kube_scheduler,
                                                                   "default-scheduler")]
        for round_number in range(1, args.rounds + 1):
            for name, label, start, scheduler_name in (ways if round_number % 2 else ways[::-1]):
                results[name].append(run_way(f"{label}-r{round_number}", api, args.pods, start, scheduler_name,
                                             args.timeout, extended=args.extended))
            ratio = sides.ratios(results, only_round=round_number)[0]
            print(f"round {round_number}: ours {results['gpu-scheduler'][-1]['pods_per_s']:.0f}, kube-scheduler "
                  f"{results['kube-scheduler'][-1]['pods_per_s']:.0f} pods/s; a/b {ratio:.2f}",
                  file=sys.stderr if args.json else sys.stdout, flush=True)
    ratios = sides.ratios(results)
    summary = {"nodes": args.nodes, "pods": args.pods, "rounds": args.rounds, "extended": args.extended,
               "a/b": statistics.median(ratios), "a/b rounds": ratios}
    if args.json:
        print(json.dumps({"results": results, "summary": summary}, indent=2))
        return 0
    asked = ("asking nvidia.com/gpu: 1 each, served by the DeviceClass (claims made by the scheduler)"
             if args.extended else "with a one-GPU claim each, claims made before the scheduler starts")
    print(f"\n{args.nodes} nodes x 8 DRA GPUs, {args.pods} pods {asked}; medians of {args.rounds} round(s)")
    print(f"{'way':<16}{'pods/s':>9}{'incl. start-up':>16}{'seconds':>9}   pods/s per round")
    for name, rounds in results.items():
        print(f"{name:<16}{statistics.median(r['pods_per_s'] for r in rounds):>9.0f}"
              f"{statistics.median(r['pods_per_s_with_startup'] for r in rounds):>16.0f}"
              f"{statistics.median(r['seconds'] for r in rounds):>9.1f}   "
              + " ".join(f"{r['pods_per_s']:.0f}" for r in rounds))
    print(f"\na/b median {summary['a/b']:.2f} (gpu-scheduler run / kube-scheduler), target >= 1.0; rounds: "
          + " ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
