"""DRA placement quality: pods left pending by our scheduler core beside an emulation of kube-scheduler.

The cluster: two nodes of eight A100s (40Gi) and one of eight H100s (80Gi), each in two PCIe roots of four, as
NVIDIA's DRA driver publishes them. Claims of 1-4 GPUs, some of one product (a CEL selector on `productName`, or on
`memory`), some under one PCIe root (`matchAttribute`), each pod with its own claim, decided one after another.
Two workloads per seed:

- **fitting** (`fitting_workload` in tests/e2e/test_dra.py, whose e2e test runs seed 26 on the real control
  plane): the claims cut every root of every node into pieces (4, 3+1, 2+2, 2+1+1 or 1+1+1+1), each piece one
  claim that the node's product suits, then shuffled; `--fill` keeps that share of them. All of them fit at once
  if each goes where it was cut from, so a pod left pending is a placement that spent devices another claim
  needed: a wrong product, or a PCIe root broken.
- **overloaded**: the e2e test's generator (tests/e2e/test_dra.py), 24 claims asking about twice the GPUs there
  are. Every scheduler fills the cluster; who is left pending depends mostly on which claims came first.

Ours: the core (`Framework.place`) with the default profile. kube-scheduler, emulated: upstream's allocator order
(first fit in slice order) on a node drawn at random among those that fit, as its equal scores leave it (its DRA
Score ranks only `firstAvailable` alternatives), averaged over --draws draws. Prints pending pods per workload,
summed over the seeds, and the ratio (target <= 1.0).

    python benchmarks/dra_placement.py [--seeds 1-40] [--fill 1.0,0.9,0.8] [--draws 8] [--per-seed] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_core import profile  # noqa: E402
from scheduler_core.dra import state  # noqa: E402
from tests.e2e.test_dra import fitting_workload, random_workload  # noqa: E402
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


def claims(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for index, spec in enumerate(specs):
        spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
        found.append({"metadata": {"namespace": "ns", "name": f"c{index}", "uid": f"c{index}"}, "spec": spec})
    return found


def ours(specs: list[dict[str, Any]]) -> int:
    framework = cluster()
    pending = 0
    for index, claim in enumerate(claims(specs)):
        framework.cluster.dra.set("ResourceClaim", claim)
        pending += framework.place(build.facts(build.claiming(f"p{index}", claim["metadata"]["name"]))).node is None
    return pending


def kube_like(specs: list[dict[str, Any]], draw: int) -> int:
    framework, rng = cluster(), random.Random(draw)
    resources, pending = framework.cluster.dra, 0
    nodes = [framework.cluster.node(framework.cluster.index[name]) for name, _, _ in NODES]
    for index, claim in enumerate(claims(specs)):
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
    parser.add_argument("--seeds", default="1-40", help="workload seeds, a range a-b")
    parser.add_argument("--fill", default="1.0,0.9,0.8", help="shares of the fitting workload's claims kept")
    parser.add_argument("--draws", type=int, default=8, help="random node draws of the kube-scheduler emulation")
    parser.add_argument("--per-seed", action="store_true", help="print each seed's figures too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    workloads = [(f"fitting {float(fill):.0%}", lambda seed, fill=float(fill): fitting_workload(seed, fill))
                 for fill in args.fill.split(",")] + [("overloaded", random_workload)]
    results = []
    for name, make in workloads:
        rows = []
        for seed in seeds:
            specs = make(seed)
            rows.append({"seed": seed, "claims": len(specs), "ours": ours(copy.deepcopy(specs)),
                         "kube_like": statistics.mean(kube_like(copy.deepcopy(specs), draw)
                                                      for draw in range(args.draws))})
        total = {key: sum(row[key] for row in rows) for key in ("claims", "ours", "kube_like")}
        results.append({"workload": name, "rows": rows, "total": total})
        print(f"... {name}: done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"pods left pending over seeds {args.seeds} (kube-like: mean of {args.draws} random draws)")
    print(f"{'workload':>14}{'pods':>7}{'ours':>7}{'kube-like':>11}{'ratio':>8}")
    for result in results:
        if args.per_seed:
            for row in result["rows"]:
                print(f"{'seed ' + str(row['seed']):>14}{row['claims']:>7}{row['ours']:>7}{row['kube_like']:>11.1f}")
        total = result["total"]
        ratio = total["ours"] / total["kube_like"] if total["kube_like"] else float("nan")
        print(f"{result['workload']:>14}{total['claims']:>7}{total['ours']:>7}{total['kube_like']:>11.1f}"
              f"{ratio:>8.2f}")
    print("ratio: ours / kube-like, target <= 1.0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
