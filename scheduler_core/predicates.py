"""Kubernetes matching rules the scheduler must honour so the kubelet accepts its bindings.

Taints and tolerations (v1helper.TolerationsTolerateTaint), node selector terms
(nodeaffinity.NodeSelector: terms ORed, expressions ANDed, an empty term matches nothing),
and GPU model tokens. Pure functions over plain data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        """As kube-scheduler prints it: `{key: value}`."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.key == taint.key and self.value == taint.value


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


@dataclass(frozen=True)
class Expression:
    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and len(self.values) == 1:
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.operator == "Gt" else have < want
        return False


@dataclass(frozen=True)
class Term:
    """A NodeSelectorTerm; matchFields supports metadata.name, the only field upstream allows."""

    expressions: tuple[Expression, ...] = ()
    fields: tuple[Expression, ...] = ()

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(e.matches(labels) for e in self.expressions) and all(
            f.matches({"metadata.name": name}) for f in self.fields
        )


def parse_terms(raw: object) -> tuple[Term, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(_term(t) for t in raw if isinstance(t, Mapping))


def _term(raw: Mapping[str, Any]) -> Term:
    return Term(_expressions(raw.get("matchExpressions")), _expressions(raw.get("matchFields")))


def _expressions(raw: object) -> tuple[Expression, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(_expression(e) for e in raw)


def _expression(raw: object) -> Expression:
    """A requirement that cannot be read matches no node: dropping it would match more."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("values") or [], list):
        return Expression("", "", ())
    values = tuple(str(v) for v in raw.get("values") or ())
    return Expression(str(raw.get("key", "")), str(raw.get("operator", "")), values)


_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def model_tokens(model: str) -> frozenset[str]:
    return frozenset(t for t in _TOKEN_SPLIT.split(model.lower()) if t)


def model_matches(wanted: Sequence[frozenset[str]], node_model: str | None) -> bool:
    """Any alternative whose tokens all appear in the node's model: `A100` matches `NVIDIA-A100-SXM4-40GB`."""
    if node_model is None:
        return False
    have = model_tokens(node_model)
    return any(alternative <= have for alternative in wanted)
