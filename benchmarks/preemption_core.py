"""Preemption in the scheduler core: milliseconds per high-priority pod, without an apiserver.

The shape of benchmarks/preemption.py (upstream's PreemptionBasic with GPUs) in the core alone: N 8-GPU nodes, each
full of low-priority 1- and 2-GPU pods in one of five mixes, then M high-priority 4-GPU pods one after another, each
as `gpu-scheduler run` handles it: a decision that fails, the preemption (the dry run over the candidate nodes, the
node chosen), the victims taken away as their deletions would, and the decision that places the pod. The figure is
the time of those steps per high-priority pod, the model's bookkeeping included; what the API writes is not.

    python benchmarks/preemption_core.py [--nodes 1000] [--pods 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_core import preemption  # noqa: E402
from tests.unit.builders import facts, node, pod, scheduler  # noqa: E402

MIXES = ([2, 2, 1, 1, 1, 1], [2, 1, 1, 1, 1, 1, 1], [2, 2, 2, 1, 1], [2, 2, 2, 2], [1] * 8)


def prioritized(name: str, priority: int, gpus: int, node_name: str | None = None) -> dict:
    obj = pod(name, gpus=gpus, node_name=node_name)
    obj["spec"]["priority"] = priority
    obj["metadata"]["uid"] = name
    return obj


def run(nodes: int, pods: int, seed: int = 1) -> dict:
    framework = scheduler(*(node(f"n{i:05d}", gpus=8) for i in range(nodes)))
    rng = random.Random(seed)
    count = 0
    for i in range(nodes):
        for gpus in rng.choice(MIXES):
            framework.cluster.restore(facts(prioritized(f"low-{count}", 1, gpus, f"n{i:05d}")))
            count += 1
    evaluator = preemption.Evaluator(framework)
    victims = 0
    started = time.perf_counter()
    for k in range(pods):
        urgent = facts(prioritized(f"high-{k}", 10, 4))
        decision, _ = preemption.decide(framework, urgent, [])
        assert decision.node is None, "the nodes should be full"
        chosen = evaluator.preempt(urgent, [], offset=rng.randrange(1 << 30))
        assert isinstance(chosen, preemption.Victims), chosen
        victims += len(chosen.pods)
        for victim in chosen.pods:
            framework.cluster.unassign(victim.identity)
        decision, _ = preemption.decide(framework, urgent, [])
        framework.cluster.assign(urgent, decision.node, decision.devices)
    seconds = time.perf_counter() - started
    return {"nodes": nodes, "low_pods": count, "high_pods": pods, "ms_per_pod": seconds / pods * 1000,
            "victims_per_pod": victims / pods}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=200, help="high-priority pods, one after another")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.pods > args.nodes:
        parser.error("--pods: at most one high-priority pod per node (each needs a node of its own)")
    result = run(args.nodes, args.pods)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['nodes']} nodes, {result['low_pods']} low-priority pods: {result['ms_per_pod']:.1f} ms per "
              f"high-priority pod (failed decision, preemption, placement), {result['victims_per_pod']:.2f} victims "
              f"per pod, over {result['high_pods']} pods")
    return 0


if __name__ == "__main__":
    sys.exit(main())
