"""Pod topology spread as kube-scheduler v1.36 has it (plugins/podtopologyspread).

A constraint spreads the pods its `labelSelector` selects, in the incoming pod's namespace, over the values
(domains) of a node label, `topologyKey`. `DoNotSchedule` constraints filter: a node fails when the pods matching
in its domain, plus the incoming pod if it matches, exceed the fewest in any domain by more than `maxSkew` (the
fewest counts as 0 while fewer than `minDomains` domains exist). `ScheduleAnyway` constraints score: fewer
matching pods in the node's domain is better. Domains are the values on nodes holding every key of the pod's
constraints (of that kind) that the inclusion policies admit: `nodeAffinityPolicy: Honor` (the default) only
nodes matching the pod's nodeSelector and required node affinity, `nodeTaintsPolicy: Honor` (default Ignore)
only nodes whose NoSchedule/NoExecute taints it tolerates. `matchLabelKeys` add the pod's own values of those
labels to the selector, as the scheduler does (the apiserver has merged them already at creation since 1.34;
ANDing them again changes nothing).

Upstream also applies default constraints (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) to a pod with
none, selecting the pods of its Services, ReplicationControllers, ReplicaSets and StatefulSets; nothing here
watches those, so a pod without constraints is not spread.

Pods are counted through podaffinity.PodIndex and topology domains read with podaffinity.Domains, as inter-pod
affinity counts them: the pods on nodes, of any scheduler, assumed or bound, not being deleted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import fields, podaffinity, predicates

HOSTNAME = "kubernetes.io/hostname"  # counted per node when scoring, as upstream does
ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
POLICIES = ("Honor", "Ignore")
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Constraint:
    """A TopologySpreadConstraint as the scheduler holds it (topologySpreadConstraint)."""

    max_skew: int
    topology_key: str
    selector: podaffinity.Selector  # matchLabelKeys merged in
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy
    honor_taints: bool = False  # nodeTaintsPolicy


@dataclass(frozen=True)
class TopologySpread:
    """A pod's constraints: `hard` filter, `soft` score. `soft_problem`: why its soft constraints cannot be read,
    which fails the pod's cycle only where upstream reads them, at PreScore (reached with more than one node)."""

    hard: tuple[Constraint, ...] = ()
    soft: tuple[Constraint, ...] = ()
    soft_problem: str | None = None


class _Invalid(ValueError):
    pass


def parse(raw: object, labels: Mapping[str, str]) -> tuple[TopologySpread | None, list[str]]:
    """`spec.topologySpreadConstraints` of a pod with `labels`: its constraints (None: it has none) and the
    problems that keep it from being scheduled at all. Never raises."""
    if raw is None:
        return None, []
    if not isinstance(raw, list):
        return None, [f"spec.topologySpreadConstraints: must be a list, got {fields.shown(raw)}"]
    found: dict[str, list[Constraint]] = {action: [] for action in ACTIONS}
    errors: dict[str, str] = {}
    problems = []
    for index, item in enumerate(raw):
        path = f"spec.topologySpreadConstraints[{index}]"
        item = fields.mapping(item)
        action = item.get("whenUnsatisfiable")
        if action not in ACTIONS:
            problems.append(f"{path}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, got "
                            f"{fields.shown(action)}")
            continue
        try:
            found[action].append(_constraint(item, path, labels))
        except _Invalid as err:
            problems.append(str(err))
        except podaffinity.InvalidTerm as err:  # upstream's own parse, which stops at the first error
            errors.setdefault(action, str(err))
    if "DoNotSchedule" in errors:
        problems.append(f"obtaining pod's hard topology spread constraints: {errors['DoNotSchedule']}")
    soft_problem = None
    if "ScheduleAnyway" in errors:
        soft_problem = f"obtaining pod's soft topology spread constraints: {errors['ScheduleAnyway']}"
    spread = TopologySpread(tuple(found["DoNotSchedule"]), tuple(found["ScheduleAnyway"]), soft_problem)
    return (spread if spread.hard or spread.soft or soft_problem else None), problems


def _constraint(item: Mapping[str, Any], path: str, labels: Mapping[str, str]) -> Constraint:
    """One constraint; fields the apiserver would refuse raise _Invalid, a selector upstream cannot read InvalidTerm."""
    max_skew = _positive(item, "maxSkew", path)
    topology_key = item.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise _Invalid(f"{path}.topologyKey: must be a label key, got {fields.shown(topology_key)}")
    min_domains = _positive(item, "minDomains", path) if item.get("minDomains") is not None else 1
    policies = [item.get(name) or default for name, default in (("nodeAffinityPolicy", "Honor"),
                                                                 ("nodeTaintsPolicy", "Ignore"))]
    for name, policy in zip(("nodeAffinityPolicy", "nodeTaintsPolicy"), policies):
        if policy not in POLICIES:
            raise _Invalid(f"{path}.{name}: must be Honor or Ignore, got {fields.shown(policy)}")
    keys = item.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise _Invalid(f"{path}.matchLabelKeys: must be a list of label keys, got {fields.shown(keys)}")
    selector = podaffinity.parse_selector(item.get("labelSelector"))
    own = [predicates.Expression(key, "In", (labels[key],)) for key in dict.fromkeys(keys) if key in labels]
    if selector is not None and own:  # mergeLabelSetWithSelector; a nil selector stays one that selects nothing
        selector = (*own, *selector)
    return Constraint(max_skew, topology_key, selector, min_domains, policies[0] == "Honor", policies[1] == "Honor")


def _positive(item: Mapping[str, Any], name: str, path: str) -> int:
    value = item.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_INT32:
        raise _Invalid(f"{path}.{name}: must be a positive 32-bit integer, got {fields.shown(value)}")
    return value


# --- the arithmetic, over node rows -------------------------------------------------------------------


@dataclass(frozen=True)
class Nodes:
    """What the constraints read of the nodes, as arrays over every row of the cluster model."""

    present: np.ndarray  # rows holding a node
    domains: Callable[[str], podaffinity.Domains]  # each row's value of a label
    affinity_mismatch: np.ndarray  # rows the pod's nodeSelector or required node affinity rules out
    untolerated: np.ndarray  # rows with a NoSchedule or NoExecute taint the pod does not tolerate
    counted: Callable[[podaffinity.Selector], tuple[np.ndarray, np.ndarray]]  # (rows, matching pods on each)

    def with_keys(self, constraints: Sequence[Constraint]) -> np.ndarray:
        """Rows whose node has every constraint's topology key (nodeLabelsMatchSpreadConstraints)."""
        found = self.present.copy()
        for constraint in constraints:
            found &= self.domains(constraint.topology_key).present[: found.size]
        return found

    def included(self, constraint: Constraint) -> np.ndarray:
        """Rows the constraint's inclusion policies admit (matchNodeInclusionPolicies)."""
        admitted = np.ones(self.present.size, dtype=bool)
        if constraint.honor_affinity:
            admitted &= ~self.affinity_mismatch
        if constraint.honor_taints:
            admitted &= ~self.untolerated
        return admitted

    def per_domain(self, constraint: Constraint, eligible: np.ndarray) -> np.ndarray:
        """Matching pods summed per domain of the constraint's key, over the pods on `eligible` rows."""
        rows, counts = self.counted(constraint.selector)
        keep = eligible[rows]
        return self.domains(constraint.topology_key).per_domain(rows[keep], counts[keep])


def filter_failures(constraints: Sequence[Constraint], labels: Mapping[str, str],
                    nodes: Nodes) -> tuple[np.ndarray, np.ndarray]:
    """PreFilter and Filter: (rows lacking a constraint's key, rows where a constraint's skew would exceed
    maxSkew), each row under the first constraint, in order, that rejects it."""
    size = nodes.present.size
    with_keys = nodes.with_keys(constraints)
    missing = np.zeros(size, dtype=bool)
    skewed = np.zeros(size, dtype=bool)
    for constraint in constraints:
        found = nodes.domains(constraint.topology_key)
        ids = found.ids[:size]
        eligible = with_keys & nodes.included(constraint)
        per_domain = nodes.per_domain(constraint, eligible)
        seen = np.unique(ids[eligible])  # the domains counted, even those holding no matching pod
        fewest = int(per_domain[seen].min()) if seen.size >= constraint.min_domains else 0
        itself = int(podaffinity.selects(constraint.selector, labels))
        open_rows = ~(missing | skewed)
        lacking = open_rows & ~found.present[:size]
        missing |= lacking
        skewed |= open_rows & ~lacking & (per_domain[ids] + itself - fewest > constraint.max_skew)
    return missing, skewed


def scores(constraints: Sequence[Constraint], candidates: np.ndarray, nodes: Nodes) -> np.ndarray:
    """PreScore, Score and NormalizeScore for the `candidates` (the rows that passed the filters): matching
    pods in each candidate's domain, weighted by the log of how many domains the candidates span, plus
    maxSkew - 1; then the fewest get 100 and the most in proportion less. Candidates without every key get 0."""
    with_keys = nodes.with_keys(constraints)
    scored = with_keys[candidates]
    total = np.zeros(candidates.size)
    for constraint in constraints:
        ids = nodes.domains(constraint.topology_key).ids
        if constraint.topology_key == HOSTNAME:  # the node's own pods, whatever the policies
            rows, counts = nodes.counted(constraint.selector)
            on_node = np.zeros(nodes.present.size, dtype=np.int64)
            on_node[rows] = counts
            matching = on_node[candidates]
            domains = int(np.count_nonzero(scored))
        else:
            matching = nodes.per_domain(constraint, with_keys & nodes.included(constraint))[ids[candidates]]
            domains = np.unique(ids[candidates[scored]]).size
        total += matching * math.log(domains + 2) + float(constraint.max_skew - 1)
    raw = np.where(total - np.floor(total) >= 0.5, np.ceil(total), np.floor(total))  # math.Round
    if not scored.any():
        return np.zeros(candidates.size)
    low, high = raw[scored].min(), raw[scored].max()
    if high == 0:
        return np.where(scored, 100.0, 0.0)
    return np.where(scored, (100 * (high + low - raw)) // high, 0.0)
