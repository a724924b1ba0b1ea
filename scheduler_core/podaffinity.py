"""Inter-pod affinity as kube-scheduler v1.36 reads it (framework/types.go and plugins/interpodaffinity).

A term selects pods by their labels (`labelSelector`) in some namespaces (`namespaces`, `namespaceSelector`;
neither: the pod's own) and names a node label (`topologyKey`) whose value is a domain. Required affinity
wants a domain holding a pod that matches every term; required anti-affinity, and the anti-affinity of pods
already placed (symmetry), forbid the domains of matching pods; preferred terms, and existing pods' terms
matched by the incoming pod, add or take away their weight in a domain. The apiserver merges
`matchLabelKeys` / `mismatchLabelKeys` into `labelSelector` when a pod is created (1.33+); the scheduler
reads only `labelSelector`, and so does this module.

Pods on nodes are kept in a `PodIndex`, grouped by namespace and labels (what terms select) and by the
terms they carry, so a decision looks at groups of alike pods and never at every pod. PodTopologySpread
(scheduler_core.spread) counts pods through the same index, label selectors and `Domains`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_core import fields, names, predicates

# A label selector: its requirements, ANDed; () selects everything, None (an absent selector) nothing.
Selector = tuple[predicates.Expression, ...] | None
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_ERRORS = 5  # errors of one requirement quoted in a message: a hostile list of values stays a short message



def selects(selector: Selector, labels: Mapping[str, str]) -> bool:
    return selector is not None and all(requirement.matches(labels) for requirement in selector)


@dataclass(frozen=True)
class AffinityTerm:
    """A PodAffinityTerm as framework.AffinityTerm holds it."""

    selector: Selector
    namespaces: frozenset[str]
    namespace_selector: Selector
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """AffinityTerm.Matches: a pod in one of the term's namespaces, with labels the term selects."""
        in_scope = namespace in self.namespaces or selects(self.namespace_selector, namespace_labels)
        return in_scope and selects(self.selector, labels)

    @property
    def reads_namespace_labels(self) -> bool:
        """A namespaceSelector with requirements: () selects every namespace without reading any labels."""
        return bool(self.namespace_selector)

    def resolved(self, namespace_labels: Mapping[str, Mapping[str, str]]) -> AffinityTerm:
        """The incoming pod's term with its namespaceSelector turned into the namespaces it selects now
        (mergeAffinityTermNamespacesIfNotEmpty), so matching placed pods needs no namespace labels."""
        if not self.reads_namespace_labels:
            return self
        chosen = {name for name, labels in namespace_labels.items() if selects(self.namespace_selector, labels)}
        return dataclasses.replace(self, namespaces=self.namespaces | chosen, namespace_selector=None)


@dataclass(frozen=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True)
class PodAffinity:
    """A pod's inter-pod affinity terms; a kind whose terms cannot be read holds none (as upstream)."""

    required: tuple[AffinityTerm, ...] = ()
    anti_required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    anti_preferred: tuple[WeightedTerm, ...] = ()

    def terms(self) -> Iterable[AffinityTerm]:
        yield from self.required
        yield from self.anti_required
        yield from (weighted.term for weighted in self.preferred + self.anti_preferred)


class InvalidTerm(ValueError):
    """A term (or a label selector) the scheduler cannot read: the message names the field as upstream's parser
    does."""


# (kind, field, upstream's name for the terms, weighted)
KINDS = (
    ("podAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "requiredAffinityTerms", False),
    ("podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "requiredAntiAffinityTerms", False),
    ("podAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "preferredAffinityTerms", True),
    ("podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "preferredAntiAffinityTerms", True),
)


def parse(affinity: Mapping[str, Any], namespace: str) -> tuple[PodAffinity | None, str | None]:
    """The pod's terms (None: it has none) and, when some cannot be read, kube-scheduler's complaint
    (`parsing pod: requiredAffinityTerms: values[0][app]: Invalid value: ...`); never raises."""
    found: list[tuple[Any, ...]] = []
    errors = []
    for kind, name, upstream, weighted in KINDS:
        raw = fields.mapping(affinity.get(kind)).get(name)
        try:
            found.append(tuple(_weighted(item, namespace) if weighted else _term(item, namespace)
                               for item in _items(raw)))
        except InvalidTerm as err:
            errors.append(f"{upstream}: {err}")
            found.append(())
    terms = PodAffinity(*found)
    problem = None
    if errors:
        problem = "parsing pod: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
    return (terms if any(found) else None), problem


def _items(raw: object) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidTerm(f"must be a list of terms, got {fields.shown(raw)}")
    return raw


def _weighted(raw: object, namespace: str) -> WeightedTerm:
    raw = _object(raw, "a WeightedPodAffinityTerm")
    weight = raw.get("weight")
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
        raise InvalidTerm(f"weight: Invalid value: {fields.shown(weight)}: must be an integer from 1 to 100")
    return WeightedTerm(weight, _term(raw.get("podAffinityTerm"), namespace))


def _term(raw: object, namespace: str) -> AffinityTerm:
    """newAffinityTerm: with neither namespaces nor a namespaceSelector, the term covers the pod's own namespace."""
    raw = _object(raw, "a PodAffinityTerm")
    selector = parse_selector(raw.get("labelSelector"))
    listed = raw.get("namespaces")
    if listed is not None and not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
        raise InvalidTerm(f"namespaces: Invalid value: {fields.shown(listed)}: must be a list of names")
    namespace_selector = parse_selector(raw.get("namespaceSelector"))
    topology_key = raw.get("topologyKey", "")
    if not isinstance(topology_key, str):
        raise InvalidTerm(f"topologyKey: Invalid value: {fields.shown(topology_key)}: must be a label key")
    if not listed and raw.get("namespaceSelector") is None:
        listed = [namespace]
    return AffinityTerm(selector, frozenset(listed or ()), namespace_selector, topology_key)


def _object(raw: object, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidTerm(f"must be {what}, got {fields.shown(raw)}")
    return raw


def parse_selector(raw: object) -> Selector:
    """metav1.LabelSelectorAsSelector, with its validation of keys, operators and values; raises InvalidTerm."""
    if raw is None:
        return None
    raw = _object(raw, "a LabelSelector")
    match_labels, expressions = raw.get("matchLabels") or {}, raw.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise InvalidTerm(f"must be a LabelSelector, got {fields.shown(raw)}")
    requirements = [_requirement(key, "In", [value], equals=True) for key, value in sorted(
        match_labels.items(), key=lambda item: str(item[0]))]
    for expression in expressions:
        expression = _object(expression, "a LabelSelectorRequirement")
        operator = expression.get("operator")
        if operator not in OPERATORS:
            raise InvalidTerm(f"{fields.shown(operator)} is not a valid label selector operator")
        values = expression.get("values") or []
        if not isinstance(values, list):
            raise InvalidTerm(f"values: Invalid value: {fields.shown(values)}: must be a list")
        requirements.append(_requirement(expression.get("key"), str(operator), values))
    return tuple(requirements)


def _requirement(key: object, operator: str, values: list[Any], *, equals: bool = False) -> predicates.Expression:
    """labels.NewRequirement: every error of one requirement, as its aggregate prints them."""
    errors = []
    if not isinstance(key, str):
        errors.append(f"key: Invalid value: {fields.shown(key)}: must be a string")
    elif key_errors := names.label_key_errors(key):
        errors.append(f"key: Invalid value: {fields.shown(key)}: {'; '.join(key_errors)}")
    if operator in ("In", "NotIn") and not values and not equals:
        errors.append("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty")
    if operator in ("Exists", "DoesNotExist") and values:
        errors.append(f"values: Invalid value: {_strings(values)}: values set must be empty for exists and does "
                      "not exist")
    for position, value in enumerate(values):
        if not isinstance(value, str):
            errors.append(f"values[{position}]: Invalid value: {fields.shown(value)}: must be a string")
        elif value_errors := names.label_value_errors(value):
            errors.append(f"values[{position}][{fields.cut(str(key))}]: Invalid value: {fields.shown(value)}: "
                          f"{'; '.join(value_errors)}")
    if errors:
        shown = errors[:MAX_ERRORS] + ([f"and {len(errors) - MAX_ERRORS} more"] if len(errors) > MAX_ERRORS else [])
        raise InvalidTerm(errors[0] if len(errors) == 1 else f"[{', '.join(shown)}]")
    return predicates.Expression(str(key), operator, tuple(values))


def _strings(values: list[Any]) -> str:
    quoted = [fields.shown(value) for value in values[:MAX_ERRORS]]
    return "[]string{" + ", ".join(quoted) + (", ..." if len(values) > MAX_ERRORS else "") + "}"


# --- placed pods --------------------------------------------------------------------------------------


@dataclass
class LabelGroup:
    """Pods of one namespace with the same labels, counted per node row; those being deleted (a
    deletionTimestamp set) apart, as PodTopologySpread leaves them out."""

    namespace: str
    labels: Mapping[str, str]
    terminating: bool = False
    rows: Counter[int] = field(default_factory=Counter)


def anchor(selectors: Iterable[Selector]) -> tuple[tuple[str, str], ...] | None:
    """The (key, value) label pairs of which a pod must carry one for every one of `selectors` to select it,
    read from their first `In` requirement; None when no requirement narrows it so (any pod may match)."""
    for selector in selectors:
        for requirement in selector or ():
            if requirement.operator == "In":
                return tuple((requirement.key, value) for value in requirement.values)
    return None


class PlacedTerms:
    """Terms of pods on nodes, each with a weight and the rows of the pods that carry it, found by the labels
    an incoming pod must have to match them: a decision looks only at the terms that may select the pod, not
    at every placed pod's terms (a thousand replica groups, each hating its own, are a thousand terms)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[AffinityTerm, int], Counter[int]] = {}
        self._by_pair: dict[tuple[str, str], set[tuple[AffinityTerm, int]]] = {}
        self._unanchored: set[tuple[AffinityTerm, int]] = set()
        self.reading_namespace_labels = 0  # terms whose namespaceSelector reads namespace labels

    def __bool__(self) -> bool:
        return bool(self.rows)

    def add(self, term: AffinityTerm, weight: int, row: int) -> None:
        key = (term, weight)
        rows = self.rows.get(key)
        if rows is None:
            rows = self.rows[key] = Counter()
            self._file(key, add=True)
        rows[row] += 1

    def remove(self, term: AffinityTerm, weight: int, row: int) -> None:
        key = (term, weight)
        if key in self.rows and _take(self.rows[key], row):
            del self.rows[key]
            self._file(key, add=False)

    def _file(self, key: tuple[AffinityTerm, int], *, add: bool) -> None:
        term = key[0]
        self.reading_namespace_labels += (1 if add else -1) * term.reads_namespace_labels
        pairs = anchor([term.selector]) if term.selector is not None else ()
        places = [self._unanchored] if pairs is None else [self._by_pair.setdefault(pair, set()) for pair in pairs]
        for place in places:
            if add:
                place.add(key)
            else:
                place.discard(key)
        if not add:
            for pair in pairs or ():
                if not self._by_pair.get(pair, True):
                    del self._by_pair[pair]

    def candidates(self, labels: Mapping[str, str]) -> set[tuple[AffinityTerm, int]]:
        """The (term, weight) entries that may select a pod with `labels`: a superset; match each to be sure."""
        found = set(self._unanchored)
        for pair in labels.items():
            found.update(self._by_pair.get(pair, ()))
        return found


class PodIndex:
    """The pods on nodes (assumed or bound, of any scheduler) as inter-pod affinity and topology spread look at
    them: by namespace and labels, and the terms they carry (upstream's PodsWithAffinity and
    PodsWithRequiredAntiAffinity): their required anti-affinity, which filters, and the terms that score (required
    affinity at hardPodAffinityWeight, preferred affinity, preferred anti-affinity negative). The cluster model
    adds and removes each pod as it accounts it."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[tuple[Any, ...], LabelGroup]] = {}
        self.anti_terms = PlacedTerms()
        self.scoring_terms = PlacedTerms()
        self.version = 0  # bumped when a group appears or goes: the selections cached below key on it
        self._selected: dict[Any, tuple[int, list[LabelGroup]]] = {}
        self._by_pair: dict[str, dict[tuple[str, str], dict[tuple[Any, ...], LabelGroup]]] = {}

    def add(self, namespace: str, labels: Mapping[str, str], terms: PodAffinity | None, row: int, *,
            terminating: bool = False) -> None:
        by_labels = self.groups.setdefault(namespace, {})
        key = (tuple(sorted(labels.items())), terminating)
        group = by_labels.get(key)
        if group is None:
            group = by_labels[key] = LabelGroup(namespace, dict(labels), terminating)
            pairs = self._by_pair.setdefault(namespace, {})
            for pair in key[0]:
                pairs.setdefault(pair, {})[key] = group
            self.version += 1
        group.rows[row] += 1
        if terms is not None:
            for term in terms.anti_required:
                self.anti_terms.add(term, 1, row)
            for term, weight in _weighted_terms(terms):
                self.scoring_terms.add(term, weight, row)

    def remove(self, namespace: str, labels: Mapping[str, str], terms: PodAffinity | None, row: int, *,
               terminating: bool = False) -> None:
        by_labels = self.groups.get(namespace, {})
        key = (tuple(sorted(labels.items())), terminating)
        group = by_labels.get(key)
        if group is not None and _take(group.rows, row):
            del by_labels[key]
            pairs = self._by_pair[namespace]
            for pair in key[0]:
                del pairs[pair][key]
                if not pairs[pair]:
                    del pairs[pair]
            if not by_labels:
                del self.groups[namespace]
                del self._by_pair[namespace]
            self.version += 1
        if terms is not None:
            for term in terms.anti_required:
                self.anti_terms.remove(term, 1, row)
            for term, weight in _weighted_terms(terms):
                self.scoring_terms.remove(term, weight, row)

    def select(self, terms: Sequence[AffinityTerm]) -> list[LabelGroup]:
        """The groups of pods every one of `terms` matches, for terms of the incoming pod (resolved: no
        namespaceSelector but the one that selects every namespace)."""
        if not all(term.selector is not None for term in terms):
            return []
        scoped = [term.namespaces for term in terms if term.namespace_selector != ()]
        return self._matching(tuple(terms), frozenset.intersection(*scoped) if scoped else None,
                              [term.selector for term in terms])

    def counted(self, namespace: str, selector: Selector) -> list[LabelGroup]:
        """The groups PodTopologySpread counts (countPodsMatchSelector): pods of `namespace` whose labels
        `selector` selects, leaving out pods being deleted; an empty selector, as a nil one, counts none."""
        if not selector:
            return []
        return [group for group in self._matching(("counted", namespace, selector), frozenset((namespace,)), [selector])
                if not group.terminating]

    def _matching(self, key: Any, namespaces: frozenset[str] | None, selectors: list[Selector]) -> list[LabelGroup]:
        """The groups in `namespaces` (None: all) whose labels every one of `selectors` selects, cached per version;
        where a selector requires a label value, only the groups with one of its values are looked at."""
        cached = self._selected.get(key)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        if len(self._selected) > 1024:
            self._selected.clear()
        pairs = anchor(selectors)
        found: list[LabelGroup] = []
        for name in self.groups.keys() if namespaces is None else namespaces:
            if pairs is None:
                looked_at: Iterable[LabelGroup] = self.groups.get(name, {}).values()
            else:
                by_pair = self._by_pair.get(name, {})
                looked_at = {id(group): group for pair in pairs for group in by_pair.get(pair, {}).values()}.values()
            found.extend(group for group in looked_at if all(selects(selector, group.labels) for selector in selectors))
        self._selected[key] = (self.version, found)
        return found


def _take(rows: Counter[int], row: int) -> bool:
    """One pod fewer on `row`; whether none is left anywhere."""
    rows[row] -= 1
    if rows[row] <= 0:
        del rows[row]
    return not rows


# --- topology domains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Domains:
    """Each node row's value of one label as a small number; rows without the label get `absent`, the
    number of values, so an array indexed by domain has one slot more, left empty, for them."""

    ids: np.ndarray
    absent: int
    index: Mapping[str, int] = field(default_factory=dict)  # each value's domain

    @classmethod
    def of(cls, node_labels: Iterable[Mapping[str, str] | None], key: str, *, missing: str | None = None) -> Domains:
        """The domains of `key` over rows (None: no node); a node without the label reads `missing`, if given."""
        values: dict[str, int] = {}
        read = (None if labels is None else labels.get(key, missing) for labels in node_labels)
        found = [-1 if value is None else values.setdefault(value, len(values)) for value in read]
        ids = np.array(found, dtype=np.int64)
        ids[ids < 0] = len(values)
        return cls(ids, len(values), values)

    @property
    def present(self) -> np.ndarray:
        return self.ids != self.absent

    def per_domain(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """`counts` of the pods on `rows`, summed per domain (pods on nodes without the label count nowhere)."""
        total = np.zeros(self.absent + 1, dtype=np.int64)
        np.add.at(total, self.ids[rows], counts)
        total[self.absent] = 0
        return total


def rows_of(groups: Iterable[Counter[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, pods on each) over the groups' counters."""
    merged: Counter[int] = Counter()
    for rows in groups:
        merged.update(rows)
    return (np.fromiter(merged.keys(), dtype=np.int64, count=len(merged)),
            np.fromiter(merged.values(), dtype=np.int64, count=len(merged)))


# --- the plugin's two halves, over the index ----------------------------------------------------------


@dataclass(frozen=True)
class Incoming:
    """The pod being scheduled, as the terms see it; its own terms resolved against the namespaces."""

    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str]  # its namespace's labels ({} when unknown, as upstream)
    terms: PodAffinity


def required_failures(index: PodIndex, pod: Incoming, domains: Callable[[str], Domains],
                      rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows failing the pod's required affinity, its required anti-affinity, and the required
    anti-affinity of placed pods (Filter's three checks, each before the next)."""
    affinity = np.zeros(rows, dtype=bool)
    if pod.terms.required:
        affinity = _affinity_failures(index, pod, domains, rows)
    anti = np.zeros(rows, dtype=bool)
    for term in pod.terms.anti_required:
        found = domains(term.topology_key)
        matched = found.per_domain(*rows_of(group.rows for group in index.select([term])))
        anti |= (matched > 0)[found.ids][:rows]
    existing = np.zeros(rows, dtype=bool)
    hated: dict[str, list[Counter[int]]] = {}
    for term, weight in index.anti_terms.candidates(pod.labels):
        if term.matches(pod.namespace, pod.labels, pod.namespace_labels):
            hated.setdefault(term.topology_key, []).append(index.anti_terms.rows[term, weight])
    for key, groups in hated.items():
        found = domains(key)
        existing |= (found.per_domain(*rows_of(groups)) > 0)[found.ids][:rows]
    return affinity, anti & ~affinity, existing & ~affinity & ~anti


def _affinity_failures(index: PodIndex, pod: Incoming, domains: Callable[[str], Domains], rows: int) -> np.ndarray:
    """satisfyPodAffinity: every term's key on the node and, in each term's domain, a pod matching all
    the terms; or, when no such pod is anywhere and the pod matches its own terms, any node with the keys
    (the first pod of a group that wants to be together)."""
    terms = pod.terms.required
    matched = rows_of(group.rows for group in index.select(terms))
    lacks_key = np.zeros(rows, dtype=bool)
    everywhere = np.ones(rows, dtype=bool)
    anywhere = 0
    for term in terms:
        found = domains(term.topology_key)
        per_domain = found.per_domain(*matched)
        anywhere += int(per_domain.sum())
        lacks_key |= ~found.present[:rows]
        everywhere &= (per_domain > 0)[found.ids][:rows]
    first_of_group = anywhere == 0 and all(term.matches(pod.namespace, pod.labels, {}) for term in terms)
    return lacks_key if first_of_group else lacks_key | ~everywhere


def preference_totals(index: PodIndex, pod: Incoming, domains: Callable[[str], Domains],
                      rows: int) -> np.ndarray:
    """PreScore and Score before normalising: per row, the weights of the incoming pod's preferred terms
    matched by pods in the row's domains (anti-affinity negative), plus those of placed pods' terms the
    incoming pod matches (their required affinity weighing hardPodAffinityWeight, 1)."""
    parts: dict[str, list[tuple[Iterable[Counter[int]], int]]] = {}
    for sign, weighted_terms in ((1, pod.terms.preferred), (-1, pod.terms.anti_preferred)):
        for weighted in weighted_terms:
            selected = [group.rows for group in index.select([weighted.term])]
            parts.setdefault(weighted.term.topology_key, []).append((selected, sign * weighted.weight))
    for term, weight in index.scoring_terms.candidates(pod.labels):
        if term.matches(pod.namespace, pod.labels, pod.namespace_labels):
            parts.setdefault(term.topology_key, []).append(([index.scoring_terms.rows[term, weight]], weight))
    totals = np.zeros(rows, dtype=np.int64)
    for key, contributions in parts.items():
        found = domains(key)
        per_domain = np.zeros(found.absent + 1, dtype=np.int64)
        for groups, weight in contributions:
            per_domain += weight * found.per_domain(*rows_of(groups))
        totals += per_domain[found.ids][:rows]
    return totals


def _weighted_terms(placed: PodAffinity) -> Iterable[tuple[AffinityTerm, int]]:
    yield from ((term, 1) for term in placed.required)  # hardPodAffinityWeight, kube-scheduler's default
    yield from ((weighted.term, weighted.weight) for weighted in placed.preferred)
    yield from ((weighted.term, -weighted.weight) for weighted in placed.anti_preferred)


def normalized(totals: np.ndarray) -> np.ndarray:
    """NormalizeScore: min to max onto 0..100, truncated to whole numbers; all alike scores 0."""
    if totals.size == 0:
        return np.zeros(0)
    low, high = int(totals.min()), int(totals.max())
    if high <= low:
        return np.zeros(totals.size)
    return np.trunc(100.0 * ((totals - low) / float(high - low)))
