"""kube-scheduler's own preemption cases (tests/data/upstream/defaultpreemption.yaml) against the preemption core:
the dry run's candidates and victims, the node chosen, and who may preempt."""

from __future__ import annotations

from typing import Any

from scheduler_core import framework, preemption
from tests.unit import upstream

TABLE = upstream.load("defaultpreemption")


def evaluator_of(case: dict[str, Any]) -> tuple[Any, preemption.Evaluator, Any, list[preemption.Budget]]:
    model = upstream.model_of(case)
    budgets = [preemption.Budget.of(upstream._namespaced(obj)) for obj in case.get("objects") or ()
               if obj.get("kind") == "PodDisruptionBudget"]
    pod = model.facts_of(upstream._with_uid(case["pod"], "incoming"))
    args = case.get("args") or {}
    evaluator = preemption.Evaluator(
        framework.Framework(model.cluster),
        min_percentage=args.get("minCandidateNodesPercentage", preemption.MIN_CANDIDATES_PERCENTAGE),
        min_absolute=args.get("minCandidateNodesAbsolute", preemption.MIN_CANDIDATES_ABSOLUTE))
    return model, evaluator, pod, budgets


def dry_run_rows(case: dict[str, Any], model: Any) -> list[int]:
    """Every node, as upstream's dry-run tests hand them all; with `statuses`, only the Unschedulable ones."""
    index = model.cluster.index
    statuses = case.get("statuses")
    if statuses is None:
        return sorted(index.values())
    return sorted(index[name] for name, code in statuses.items() if code == "Unschedulable" and name in index)


@upstream.each_case(TABLE)
def test_preemption_as_upstream(case):
    model, evaluator, pod, budgets = evaluator_of(case)
    if "eligible" in case:
        unresolvable = case.get("nominated_node_status") == "UnschedulableAndUnresolvable"
        reason = preemption.eligible(pod, model.cluster, nominated_unresolvable=unresolvable)
        assert (reason is None) == case["eligible"]
        assert reason == case.get("message")
    if "candidates" not in case and "chosen" not in case and "victims" not in case:
        return
    found = evaluator.candidates(pod, budgets, rows=dry_run_rows(case, model), offset=case.get("offset", 0)) \
        if preemption.eligible(pod) is None else []
    if "candidates" in case:
        assert {v.node: {"victims": sorted(p.key.partition("/")[2] for p in v.pods), "pdb_violations": v.pdb_violations}
                for v in found} == case["candidates"]
    chosen = evaluator.pick(found)
    if "chosen" in case:
        wanted = case["chosen"]
        name = chosen.node if chosen is not None else None
        assert name in wanted if isinstance(wanted, list) else name == wanted
    if "victims" in case:
        taken = {p.key.partition("/")[2] for p in chosen.pods} if chosen is not None else set()
        assert taken == set(case["victims"])
