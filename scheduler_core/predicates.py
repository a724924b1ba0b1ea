"""Kubernetes matching rules the scheduler must honour so the kubelet accepts its bindings.

Taints and tolerations (v1.Toleration.ToleratesTaint), node selector terms
(component-helpers' nodeaffinity: terms ORed, requirements ANDed, an empty term matches nothing,
a term that does not parse matches nothing while the others still may), and GPU model tokens.
Pure functions over plain data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import fields, names

HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """An empty effect or key matches any. `Lt` and `Gt` tolerate nothing: they need the feature gate
        TaintTolerationComparisonOperators, alpha and off by default in v1.36, as any unknown operator."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value


def parse_taints(raw: object) -> tuple[Taint, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in raw
        if isinstance(t, Mapping)
    )


def parse_tolerations(raw: object) -> tuple[Toleration, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Toleration(
            str(t.get("key", "") or ""),
            str(t.get("operator", "") or "Equal"),
            str(t.get("value", "") or ""),
            str(t.get("effect", "") or ""),
        )
        for t in raw
        if isinstance(t, Mapping)
    )


def first_untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration],
                      effects: Sequence[str] = HARD_EFFECTS) -> Taint | None:
    for taint in taints:
        if taint.effect in effects and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def count_untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration], effect: str) -> int:
    return sum(1 for taint in taints if taint.effect == effect and not any(t.tolerates(taint) for t in tolerations))


LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")  # matchFields: metadata.name, the only field a node selector reads


@dataclass(frozen=True)
class Expression:
    """A NodeSelectorRequirement that parsed (see `parse_term`)."""

    key: str
    operator: str  # one of LABEL_OPERATORS (matchExpressions) or FIELD_OPERATORS (matchFields)
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """As labels.Requirement.Matches: Gt and Lt compare a label that reads as an int64."""
        value = labels.get(self.key)
        if self.operator in ("In", "NotIn"):
            return (value is not None and value in self.values) == (self.operator == "In")
        if self.operator in ("Exists", "DoesNotExist"):
            return (value is not None) == (self.operator == "Exists")
        have = names.int64(value) if value is not None else None
        want = names.int64(self.values[0]) if len(self.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if self.operator == "Gt" else have < want

    def matches_field(self, name: str) -> bool:
        """As a field selector over the node's fields: a key other than metadata.name reads as ""."""
        value = name if self.key == "metadata.name" else ""
        return (value == self.values[0]) == (self.operator == "In")


@dataclass(frozen=True)
class Term:
    """A NodeSelectorTerm: its label requirements and its field requirements, ANDed.

    `problem` says why it does not parse (kube-scheduler's parse error, first of them); such a term
    matches no node, while the other terms of a selector still may.
    """

    expressions: tuple[Expression, ...] = ()
    fields: tuple[Expression, ...] = ()
    problem: str | None = None

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if self.problem is not None or not self.expressions and not self.fields:
            return False
        # kube-scheduler skips the fields of a node without a name (it reads no fields of it)
        return all(e.matches(labels) for e in self.expressions) and (
            not name or all(f.matches_field(name) for f in self.fields))


def parse_terms(raw: object) -> tuple[Term, ...]:
    """The terms of a required node selector; an entry that is no object matches nothing, so it is left out."""
    if not isinstance(raw, list):
        return ()
    return tuple(parse_term(t) for t in raw if isinstance(t, Mapping))


def parse_term(raw: Mapping[str, Any]) -> Term:
    """A term, checked as nodeaffinity.newNodeSelectorTerm checks it (label keys, label values, operators and
    their values): the API refuses most of what fails, but not an invalid label value in a preferred term,
    nor whatever older apiservers let through."""
    found: dict[str, tuple[Expression, ...]] = {}
    for part, operators in (("matchExpressions", LABEL_OPERATORS), ("matchFields", FIELD_OPERATORS)):
        requirements = raw.get(part)
        if requirements is None:
            requirements = []
        if not isinstance(requirements, list):
            return Term(problem=f"{part}: must be a list, got {fields.shown(requirements)}")
        parsed = []
        for index, requirement in enumerate(requirements):
            expression = _expression(requirement, operators)
            if isinstance(expression, str):
                return Term(problem=f"{part}[{index}]{expression}")
            parsed.append(expression)
        found[part] = tuple(parsed)
    return Term(found["matchExpressions"], found["matchFields"])


def _expression(raw: object, operators: tuple[str, ...]) -> Expression | str:
    """The requirement, or why it does not parse (after its path: `.values[0]: ...`)."""
    if not isinstance(raw, Mapping):
        return f": must be an object, got {fields.shown(raw)}"
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    values = [] if values is None else values
    if not isinstance(key, str):
        return f".key: must be a string, got {fields.shown(key)}"
    if operator not in operators:
        return f".operator: must be one of {', '.join(operators)}, got {fields.shown(operator)}"
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return f".values: must be a list of strings, got {fields.shown(values)}"
    problem = _values_problem(operator, values, is_field=operators == FIELD_OPERATORS)
    if problem is None and operators == LABEL_OPERATORS:
        problem = _label_problem(key, values)
    return Expression(key, operator, tuple(values)) if problem is None else problem


def _values_problem(operator: str, values: list[str], *, is_field: bool) -> str | None:
    if is_field and len(values) != 1:
        return ".values: must have exactly one element"
    if operator in ("In", "NotIn") and not values:
        return ".values: must not be empty for In and NotIn"
    if operator in ("Exists", "DoesNotExist") and values:
        return ".values: must be empty for Exists and DoesNotExist"
    if operator in ("Gt", "Lt") and (len(values) != 1 or names.int64(values[0]) is None):
        return ".values: must be exactly one integer for Gt and Lt"
    return None


def _label_problem(key: str, values: list[str]) -> str | None:
    """Why a label requirement's key or a value is no valid label key or value, or None."""
    problem = names.qualified_name_problem(key)
    if problem is not None:
        return f".key: {problem}, got {fields.shown(key)}"
    for index, value in enumerate(values):
        problem = names.label_value_problem(value)
        if problem is not None:
            return f".values[{index}]: {problem}, got {fields.shown(value)}"
    return None

_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def model_tokens(model: str) -> frozenset[str]:
    return frozenset(t for t in _TOKEN_SPLIT.split(model.lower()) if t)


def model_matches(wanted: Sequence[frozenset[str]], node_model: str | None) -> bool:
    """Any alternative whose tokens all appear in the node's model: `A100` matches `NVIDIA-A100-SXM4-40GB`."""
    if node_model is None:
        return False
    have = model_tokens(node_model)
    return any(alternative <= have for alternative in wanted)
