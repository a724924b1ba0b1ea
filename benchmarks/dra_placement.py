"""DRA placement quality: pods left pending by our scheduler core beside an emulation of kube-scheduler, on random
claims that ask for more GPUs than there are.

The cluster: two nodes of eight A100s (40Gi) and one of eight H100s (80Gi), each in two PCIe roots of four, as
NVIDIA's DRA driver publishes them. The workload (the e2e test's generator, tests/e2e/test_dra.py): 24 claims of
1-4 GPUs, some of one product or with less memory, some under one PCIe root, decided in order. Ours: the core
(`Framework.place`) with the default profile. kube-scheduler, emulated: upstream's allocator order (first fit in
slice order) on a node drawn at random among those that fit, as its equal scores leave it (its DRA Score ranks only
`firstAvailable` alternatives), averaged over --draws draws. Prints pending pods per seed and in total.

    python benchmarks/dra_placement.py [--seeds 1-10] [--draws 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_core import profile  # noqa: E402
from scheduler_core.dra import state  # noqa: E402
from tests.e2e.test_dra import random_workload  # noqa: E402
from tests.unit import test_dra as build  # noqa: E402

NODES = (("a100-0", "NVIDIA A100-SXM4-40GB", "40Gi"), ("a100-1", "NVIDIA A100-SXM4-40GB", "40Gi"),
         ("h100-0", "NVIDIA H100 80GB HBM3", "80Gi"))


def cluster() -> Any:
    framework = build.scheduler(*(build.node(name, gpus=0) for name, _, _ in NODES),
                                scheduling=profile.Scheduling())
    resources = framework.cluster.dra
    for kind in state.KINDS:
        resources.clear(kind)
    resources.set("DeviceClass", {"metadata": {"name": "gpu.nvidia.com"},
                                  "spec": {"selectors": [{"cel": {"expression": build.CLASS_SELECTOR}}]}})
    for name, product, memory in NODES:
        resources.set("ResourceSlice", build.gpu_slice(name, product=product, memory=memory))
    return framework


def claims(seed: int) -> list[dict[str, Any]]:
    found = []
    for index, spec in enumerate(random_workload(seed)):
        spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
        found.append({"metadata": {"namespace": "ns", "name": f"c{index}", "uid": f"c{index}"}, "spec": spec})
    return found


def ours(seed: int) -> int:
    framework = cluster()
    pending = 0
    for index, claim in enumerate(claims(seed)):
        framework.cluster.dra.set("ResourceClaim", claim)
        pending += framework.place(build.facts(build.claiming(f"p{index}", claim["metadata"]["name"]))).node is None
    return pending


def kube_like(seed: int, draw: int) -> int:
    framework, rng = cluster(), random.Random(draw)
    resources, pending = framework.cluster.dra, 0
    nodes = [framework.cluster.node(framework.cluster.index[name]) for name, _, _ in NODES]
    for index, claim in enumerate(claims(seed)):
        resources.set("ResourceClaim", claim)
        pod = build.facts(build.claiming(f"p{index}", claim["metadata"]["name"]))
        prepared = resources.pre_filter("ns", f"p{index}", pod.uid, pod.resource_claims)
        assert not isinstance(prepared, str), prepared
        fits = [outcome for node in nodes if isinstance(outcome := resources.filter(node, prepared), list)]
        if not fits:
            pending += 1
            continue
        resources.assume(("ns", claim["metadata"]["name"]), rng.choice(fits)[0])  # one claim, one allocation
    return pending


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1-10", help="workload seeds, a range a-b")
    parser.add_argument("--draws", type=int, default=8, help="random node draws of the kube-scheduler emulation")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    rows = [{"seed": seed, "ours": ours(seed),
             "kube_like": statistics.mean(kube_like(seed, draw) for draw in range(args.draws))} for seed in seeds]
    total = {"ours": sum(r["ours"] for r in rows), "kube_like": sum(r["kube_like"] for r in rows)}
    if args.json:
        print(json.dumps({"rows": rows, "total": total}, indent=2))
        return 0
    print(f"{'seed':>5}{'ours':>7}{'kube-like':>11}   (pods left pending of 24; kube-like: mean of {args.draws} draws)")
    for row in rows:
        print(f"{row['seed']:>5}{row['ours']:>7}{row['kube_like']:>11.1f}")
    print(f"{'all':>5}{total['ours']:>7}{total['kube_like']:>11.1f}   ours / kube-like "
          f"{total['ours'] / total['kube_like']:.2f} (target <= 1.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
