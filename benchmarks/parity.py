"""Differential parity against the real kube-scheduler, over many seeds: does `gpu-scheduler run` ever bind a pod
where kube-scheduler's filters would not, and how many pods does each leave pending?

The same comparison as tests/e2e/test_parity.py (which runs 3 seeds in CI), over as many seeds as asked, on one
etcd + kube-apiserver + kube-scheduler from `hack/control-plane.sh build`. For each seed: 12 GPU nodes in 3 zones
(one tainted) and about 40 GPU pods in groups with required pod anti-affinity, pod affinity to another group's
zone, a DoNotSchedule zone spread constraint and host ports, scheduled once by `gpu-scheduler run` and once by
kube-scheduler from the same start. Every binding of ours is then put to kube-scheduler pinned to the same node
(its own filters decide), and every pod ours left pending is offered to kube-scheduler in ours' final state.

    python benchmarks/parity.py [--seeds 1-20] [--json]

Each seed takes about 35 s. Exit status 1 when any binding of ours is refused by kube-scheduler, a pod ours left
pending without a reason of its own is placed by it, or a node is overcommitted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import sides  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402
from tests.e2e import parity  # noqa: E402
from tests.e2e.scheduling import start_scheduler  # noqa: E402


def seeds_of(text: str) -> list[int]:
    """`1-20`, `3,7,9` or a mix (`1-5,9`): the seeds, in order, without repeats."""
    found: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            span = range(int(first), int(last or first) + 1)
        except ValueError:
            raise argparse.ArgumentTypeError(f"seeds: {part!r} is not a number or a range like 1-20") from None
        found.extend(seed for seed in span if seed not in found)
    if not found:
        raise argparse.ArgumentTypeError(f"seeds: {text!r} names no seed")
    return found


def kinds_of(message: str) -> str:
    """`0/24 nodes are available: 11 node(s) didn't match Pod's node affinity/selector, 9 Insufficient
    nvidia.com/gpu, 2 ...` without the counts and the other pools' nodes (which every pod's node selector
    leaves out): what kept the pod from the nodes of its own pool."""
    _, _, listed = message.partition("are available: ")
    kinds = [re.sub(r"^\d+ ", "", part.strip().rstrip(".")) for part in (listed or message).split(", ")]
    return ", ".join(sorted(kind for kind in kinds if "node affinity/selector" not in kind))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("1-20"), help="e.g. 1-20 or 4,8,15 (default 1-20)")
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    suffix = uuid.uuid4().hex[:5]
    ours, kube = f"parity-ours-{suffix}", f"parity-kube-{suffix}"
    work = Path(tempfile.mkdtemp(prefix="parity-bench-"))
    config = work / "config.yaml"
    config.write_text(f"schedulerName: {ours}\n")
    outcomes: list[parity.Outcome] = []
    running: dict[str, Any] = {}
    with cp.ControlPlane() as plane:
        api = plane.api_client()
        pinning = parity.PinningExtender().start()
        kube_scheduler = plane.start_scheduler(pinning.config(kube))

        def start_ours() -> Any:
            running["ours"] = start_scheduler(plane.kubeconfig, work, "--config", str(config), name="parity-run")
            return running["ours"]

        def stop_ours() -> None:
            running.pop("ours").stop()

        try:
            for number, seed in enumerate(args.seeds, 1):
                outcome = parity.compare(api, seed, prefix=f"parity-{suffix}", ours=ours, kube=kube,
                                         start_ours=start_ours, stop_ours=stop_ours)
                outcomes.append(outcome)
                print(f"[{number}/{len(args.seeds)}] {outcome.summary()}", file=sys.stderr if args.json else sys.stdout,
                      flush=True)
                for problem in outcome.refused + outcome.missed + outcome.overcommitted:
                    print(f"    {problem}", file=sys.stderr)
        finally:
            if "ours" in running:
                stop_ours()
            kube_scheduler.stop()
            pinning.stop()
    failures = sum(len(o.refused) + len(o.missed) + len(o.overcommitted) for o in outcomes)
    if args.json:
        print(json.dumps({"outcomes": [{**asdict(o), "pending": o.pending}
                                       for o in outcomes],
                          "failures": failures}, indent=2))
        return 1 if failures else 0
    total = {key: sum(getattr(o, key) for o in outcomes) for key in ("pods", "bound", "pending", "kube_pending")}
    refused = sum(len(o.refused) for o in outcomes)
    missed = sum(len(o.missed) for o in outcomes)
    print(f"\n{len(outcomes)} seeds, {total['pods']} pods: ours bound {total['bound']} and left {total['pending']} "
          f"pending; kube-scheduler alone left {total['kube_pending']} pending")
    print(f"bindings of ours that kube-scheduler refuses: {refused}; pods ours left pending that kube-scheduler "
          f"places in the same state: {missed}; overcommitted nodes: {sum(len(o.overcommitted) for o in outcomes)}")
    reasons = Counter(kinds_of(reason) for o in outcomes for reason in o.left.values())
    if reasons:
        print("why ours left pods pending (none of them fits under kube-scheduler's filters in ours' final state):")
        for kinds, count in reasons.most_common():
            print(f"  {count:4d}  {kinds}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
