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

A pod declaring no constraints gets kube-scheduler's system default ones (hostname maxSkew 3, zone maxSkew 5,
both ScheduleAnyway, so they score and never filter) over its default selector: the selectors of the Services of
its namespace that select it, merged, with its controlling ReplicationController's merged in or its ReplicaSet's or
StatefulSet's ANDed (helper.DefaultSelector). Nothing selecting it, no defaults. With them, a node without a
topology key is scored all the same (upstream's requireAllTopologies is false): it gets nothing from that key's
constraint, and counts in the domain of the empty value. `DefaultSelectors` keeps those selectors from the watches
of `run`; until the Services, and the pod's controller's kind, have been listed, a pod's default selector is not
known and the score abstains for it (0 everywhere, as for a pod nothing selects) rather than spread it by half a
selector. Decisions do not wait for those watches.

Pods are counted through podaffinity.PodIndex and topology domains read with podaffinity.Domains, as inter-pod
affinity counts them: the pods on nodes, of any scheduler, assumed or bound, not being deleted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from scheduler_core import fields, podaffinity, predicates
from scheduler_core.nodes import ZONE_LABEL

HOSTNAME = "kubernetes.io/hostname"  # counted per node when scoring, as upstream does
SYSTEM_DEFAULTS = ((HOSTNAME, 3), (ZONE_LABEL, 5))  # (topologyKey, maxSkew) of systemDefaultConstraints, ScheduleAnyway
# The kinds whose selectors make a pod's default selector, and the (group, version) DefaultSelector knows each by
# in a pod's controller reference; a Service is never one.
SELECTING_KINDS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")
CONTROLLERS = {("", "v1", "ReplicationController"), ("apps", "v1", "ReplicaSet"), ("apps", "v1", "StatefulSet")}
MAX_NAME = 253  # characters of an object's name: a longer reference names nothing
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


# --- the system defaults -------------------------------------------------------------------------------


class Controller(NamedTuple):
    """A pod's controller as DefaultSelector looks it up: by kind and name, in the pod's namespace."""

    kind: str
    name: str


def controller_of(references: object) -> Controller | None:
    """The pod's controller (its first ownerReference with `controller: true`, GetControllerOfNoCopy) when it is a
    ReplicationController (v1), a ReplicaSet or a StatefulSet (apps/v1); None for any other, or none."""
    for reference in fields.sequence(references):
        reference = fields.mapping(reference)
        if reference.get("controller") is not True:
            continue
        api_version, kind, name = (reference.get(key) for key in ("apiVersion", "kind", "name"))
        if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str)):
            return None
        group_version = _group_version(api_version)
        if group_version is None or (*group_version, kind) not in CONTROLLERS or len(name) > MAX_NAME:
            return None
        return Controller(kind, name)
    return None


def _group_version(text: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: `v1` is the core group's, `apps/v1` a group's; a second slash is an error."""
    if text.count("/") > 1:
        return None
    group, _, version = text.rpartition("/")
    return group, version


def system_defaults(selector: podaffinity.Selector) -> tuple[Constraint, ...]:
    """buildDefaultConstraints with the system defaults: none for an empty (or unknown) default selector."""
    return tuple(Constraint(max_skew, key, selector) for key, max_skew in SYSTEM_DEFAULTS) if selector else ()


class DefaultSelectors:
    """What helper.DefaultSelector reads, kept from the Service, ReplicationController, ReplicaSet and StatefulSet
    watches: each object's selector, by kind, namespace and name (upstream's listers look a controller up by
    name, and one watch delivers an object's events in order), and the kinds listed so far. A selector that adds
    nothing to a default selector (a Service's or ReplicationController's empty map; a ReplicaSet's or
    StatefulSet's that is empty or does not parse) is not kept. `version` changes with what is kept."""

    def __init__(self) -> None:
        # kind -> namespace -> name -> selector: a label map (Service, ReplicationController), else requirements
        self.selectors: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in SELECTING_KINDS}
        self.listed: set[str] = set()
        self.version = 0

    @staticmethod
    def read(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, Any]:
        """(namespace, name, selector) of an object of `kind`; raises on an object without a name."""
        metadata = obj["metadata"]
        raw = fields.mapping(obj.get("spec")).get("selector")
        selector: Any
        if kind in ("Service", "ReplicationController"):
            selector = fields.strings(raw)
        else:
            try:
                selector = podaffinity.parse_selector(raw)  # LabelSelectorAsSelector; nil selects nothing, adds nothing
            except podaffinity.InvalidTerm:
                selector = None  # upstream leaves the selector as it was
        return str(metadata.get("namespace") or ""), str(metadata["name"]), selector or None

    def set(self, kind: str, namespace: str, name: str, selector: Any) -> None:
        """One object added or changed; deleted, or adding nothing, when `selector` is None."""
        if self.selectors[kind].get(namespace, {}).get(name) == selector:
            return
        by_name = self.selectors[kind].setdefault(namespace, {})
        if selector is None:
            del by_name[name]
        else:
            by_name[name] = selector
        if not by_name:
            del self.selectors[kind][namespace]
        self.version += 1

    def relisted(self, kind: str, found: Iterable[tuple[str, str, Any]]) -> None:
        """Every object of `kind`, as a list shows them: the kind is known from now on."""
        selectors: dict[str, dict[str, Any]] = {}
        for namespace, name, selector in found:
            if selector is not None:
                selectors.setdefault(namespace, {})[name] = selector
        if kind not in self.listed or selectors != self.selectors[kind]:
            self.selectors[kind] = selectors
            self.listed.add(kind)
            self.version += 1

    def selector_for(self, namespace: str, labels: Mapping[str, str],
                     controller: Controller | None) -> podaffinity.Selector:
        """DefaultSelector: the label maps of the namespace's Services that select the pod, merged, then its
        ReplicationController's merged in (labels.Merge: its values win) or its ReplicaSet's or StatefulSet's
        requirements added. None while the Services or the controller's kind have not been listed."""
        if "Service" not in self.listed or (controller is not None and controller.kind not in self.listed):
            return None
        merged: dict[str, str] = {}
        for selector in self.selectors["Service"].get(namespace, {}).values():
            if all(labels.get(key) == value for key, value in selector.items()):
                merged.update(selector)
        added: tuple[predicates.Expression, ...] = ()
        if controller is not None:
            own = self.selectors[controller.kind].get(namespace, {}).get(controller.name)
            if controller.kind == "ReplicationController":
                merged.update(own or {})
            else:
                added = own or ()
        return tuple(predicates.Expression(key, "In", (value,)) for key, value in sorted(merged.items())) + added


# --- the arithmetic, over node rows -------------------------------------------------------------------


@dataclass(frozen=True)
class Nodes:
    """What the constraints read of the nodes, as arrays over every row of the cluster model."""

    present: np.ndarray  # rows holding a node
    domains: Callable[[str], podaffinity.Domains]  # each row's value of a label
    blank_domains: Callable[[str], podaffinity.Domains]  # the same, a node without the label reading "" instead
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

    def per_domain(self, constraint: Constraint, eligible: np.ndarray,
                   found: podaffinity.Domains | None = None) -> np.ndarray:
        """Matching pods summed per domain of the constraint's key (as `found` reads it, by default `domains`),
        over the pods on `eligible` rows."""
        rows, counts = self.counted(constraint.selector)
        keep = eligible[rows]
        return (found or self.domains(constraint.topology_key)).per_domain(rows[keep], counts[keep])


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


def scores(constraints: Sequence[Constraint], candidates: np.ndarray, nodes: Nodes, *,
           system_defaulted: bool = False) -> np.ndarray:
    """PreScore, Score and NormalizeScore for the `candidates` (the rows that passed the filters): matching
    pods in each candidate's domain, weighted by the log of how many domains the candidates span, plus
    maxSkew - 1; then the fewest get 100 and the most in proportion less. Candidates without every key get 0,
    unless the constraints are the system defaults (`system_defaulted`): then every candidate is scored, a key
    it lacks adds nothing to its sum, and for counting a node without the key is in the domain of the value ""."""
    eligible = nodes.present if system_defaulted else nodes.with_keys(constraints)
    scored = eligible[candidates]
    total = np.zeros(candidates.size)
    for constraint in constraints:
        key = constraint.topology_key
        if key == HOSTNAME:  # the node's own pods, whatever the policies
            rows, counts = nodes.counted(constraint.selector)
            on_node = np.zeros(nodes.present.size, dtype=np.int64)
            on_node[rows] = counts
            matching = on_node[candidates]
            domains = int(np.count_nonzero(scored))
        else:
            found = nodes.blank_domains(key) if system_defaulted else nodes.domains(key)
            matching = nodes.per_domain(constraint, eligible & nodes.included(constraint), found)[found.ids[candidates]]
            domains = np.unique(found.ids[candidates[scored]]).size
        labelled = nodes.domains(key).present[candidates]
        total += np.where(labelled, matching * math.log(domains + 2) + float(constraint.max_skew - 1), 0.0)
    raw = np.where(total - np.floor(total) >= 0.5, np.ceil(total), np.floor(total))  # math.Round
    if not scored.any():
        return np.zeros(candidates.size)
    low, high = raw[scored].min(), raw[scored].max()
    if high == 0:
        return np.where(scored, 100.0, 0.0)
    return np.where(scored, (100 * (high + low - raw)) // high, 0.0)
