"""Reading Kubernetes objects from files the way kubectl writes them.

A single object, a multi-document YAML stream, or a list (`kind: List`, `NodeList`, ...,
what `kubectl get -o yaml|json` prints); JSON is YAML, so one reader serves both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ObjectsError(ValueError):
    """A file that does not hold Kubernetes objects; the message names the file and the problem."""


def load(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError as err:
        raise ObjectsError(f"{path}: cannot read ({err.strerror})") from err
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ObjectsError(f"{path}: not valid YAML or JSON: {' '.join(str(err).split())}") from err
    objects: list[dict[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, dict):
            raise ObjectsError(f"{path}: document {number} is not an object")
        if str(document.get("kind", "")).endswith("List") and isinstance(document.get("items"), list):
            items = document["items"]
        else:
            items = [document]
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
                raise ObjectsError(f"{path}: document {number}: every object needs metadata")
            objects.append(item)
    return objects
