"""Kubernetes LabelSelector: parsed once, matched many times.

Semantics follow metav1.LabelSelectorAsSelector: matchLabels and every matchExpression
are ANDed; an empty selector matches everything; `NotIn` and `DoesNotExist` match an
object that lacks the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def describe(self) -> str:
        """The selector in `kubectl get -l` syntax, for messages."""
        parts = []
        for r in self.requirements:
            if r.operator == "Exists":
                parts.append(r.key)
            elif r.operator == "DoesNotExist":
                parts.append(f"!{r.key}")
            elif r.operator == "In" and len(r.values) == 1:
                parts.append(f"{r.key}={next(iter(r.values))}")
            else:
                op = "in" if r.operator == "In" else "notin"
                parts.append(f"{r.key} {op} ({','.join(sorted(r.values))})")
        return ",".join(parts) or "<everything>"
