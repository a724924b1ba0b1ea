"""Kubernetes objects from the text of a file, the way kubectl writes them.

A single object, a multi-document YAML stream, or a list (`kind: List`, `NodeList`, ...,
what `kubectl get -o yaml|json` prints); JSON is YAML, so one reader serves both. The
caller says which kinds the text may hold, so a nodes file given where pods belong is an
error naming what was found, not an empty result. Pure: the caller reads the file and
names it (`origin`) for the messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import yaml


class ObjectsError(ValueError):
    """Text that does not hold the expected Kubernetes objects; the message names its origin and the problem."""


def parse(text: str, *, origin: str, kinds: Iterable[str] | None = None, also: Iterable[str] = ()
          ) -> list[dict[str, Any]]:
    """Every object in `text`, each with kind and metadata; with `kinds`, only those (or of the kinds `also` lets
    in, which messages leave unnamed: storage objects beside pods), and at least one."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ObjectsError(f"{origin}: not valid YAML or JSON: {describe_yaml_error(err)}") from err
    expected = f"; expected {' or '.join(kinds)} objects" if kinds is not None else ""
    objects: list[dict[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, dict):
            raise ObjectsError(f"{origin}: document {number} is not an object")
        list_kind = str(document.get("kind", ""))
        if list_kind.endswith("List") and isinstance(document.get("items"), list):
            # the API's own lists (NodeList, ...) leave the kind out of their items
            item_kind = list_kind[: -len("List")] or None
            items = [{"kind": item_kind, **item} if isinstance(item, dict) and item_kind else item
                     for item in document["items"]]
        else:
            items = [document]
        for item in items:
            if not isinstance(item, dict) or not item.get("kind") or not isinstance(item.get("metadata"), dict):
                raise ObjectsError(f"{origin}: document {number} is not a Kubernetes object "
                                   f"(every object has kind and metadata){expected}")
            objects.append(item)
    if kinds is not None:
        _check_kinds(origin, objects, tuple(kinds), tuple(also))
    return objects


def _check_kinds(origin: str, objects: list[dict[str, Any]], kinds: tuple[str, ...], also: tuple[str, ...]) -> None:
    expected = " or ".join(kinds)
    if not objects:
        raise ObjectsError(f"{origin}: holds no objects; expected {expected} objects")
    stray = next((o for o in objects if o["kind"] not in kinds + also), None)
    if stray is None:
        return
    counts = ", ".join(f"{count} {kind}" for kind, count in Counter(str(o["kind"]) for o in objects).most_common())
    raise ObjectsError(f"{origin}: expected {expected} objects, found {counts} "
                       f"(first unexpected: {stray['kind']} {name_of(stray)})")


def name_of(obj: dict[str, Any]) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    return f"{metadata['namespace']}/{name}" if metadata.get("namespace") else str(name)


def describe_yaml_error(err: yaml.YAMLError) -> str:
    """`line 3, column 7: mapping values are not allowed here`: where, then what (PyYAML's own words)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(err).split())
    context = getattr(err, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")
