"""The Helm chart (charts/gpu-scheduler) rendered by the real helm, next to the kustomize tree it must not drift from.

`render` is `helm template` of the chart; `kustomize` is `kubectl kustomize` of an entry point of manifests/.
`comparable` puts both in one form: the objects by apiVersion, kind, namespace and name, without what differs by
design (Helm's standard labels; the content hash in a generated ConfigMap's name, which each tool computes its own
way; empty lists and maps, which the API drops) and with the embedded configurations parsed (Helm's toYaml orders
keys and drops comments). The Namespace object is the caller's to leave out: Helm users create it with
`--create-namespace`.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import controlplane as cp
from tests.e2e import helm
from tests.e2e.installing import MANIFESTS, NAMESPACE

CHART = Path(__file__).parents[2] / "charts" / "gpu-scheduler"
RELEASE = "gpu-scheduler"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
EMBEDDED_CONFIG = "config.yaml"  # the data key of gpu-scheduler-config and of kube-scheduler's configuration
GENERATED_NAME = re.compile(r"\b(gpu-kube-scheduler-config)-[a-z0-9]{10}\b")

Key = tuple[str, str, str, str]


def render(*settings: str, namespace: str = NAMESPACE, values: dict[str, Any] | None = None,
           kubeconfig: Path | None = None) -> list[dict[str, Any]]:
    """`helm template` of the chart into `namespace`: `--set` for each of `settings`, and `values` as a values file."""
    args: list[str | Path] = ["template", RELEASE, CHART]
    for setting in settings:
        args += ["--set", setting]
    if values is not None:
        args += ["--values", "-"]
    result = helm.helm(*args, namespace=namespace, kubeconfig=kubeconfig,
                       stdin=None if values is None else yaml.safe_dump(values))
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def kustomize(entry_point: str) -> list[dict[str, Any]]:
    """`kubectl kustomize manifests/<entry_point>`, as `kubectl apply -k` installs it."""
    bin_dir = cp.find_binaries()
    assert bin_dir is not None, "control-plane binaries not built: run hack/control-plane.sh build"
    result = subprocess.run([str(bin_dir / "kubectl"), "kustomize", str(MANIFESTS / entry_point)],
                            capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def key(document: dict[str, Any]) -> Key:
    metadata = document["metadata"]
    return document["apiVersion"], document["kind"], metadata.get("namespace", ""), metadata["name"]


def comparable(documents: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The objects as both tools must agree on them, by apiVersion, kind, namespace and name."""
    objects = {}
    for document in documents:
        normalized = _without_empty(_parsed_configs(_without_helm_labels(document)))
        normalized = json.loads(GENERATED_NAME.sub(r"\1-<hash>", json.dumps(normalized)))
        objects[key(normalized)] = normalized
    return objects


def _without_helm_labels(document: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(document)
    labels = document["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    return document


def _parsed_configs(document: dict[str, Any]) -> dict[str, Any]:
    data = document.get("data") if document["kind"] == "ConfigMap" else None
    if data and EMBEDDED_CONFIG in data:
        data[EMBEDDED_CONFIG] = yaml.safe_load(data[EMBEDDED_CONFIG])
    return document


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def differences(chart: dict[Key, dict[str, Any]], kustomized: dict[Key, dict[str, Any]]) -> list[str]:
    """What the chart renders differently from kustomize, one line per object or field: empty when they agree."""
    lines = [f"only the chart renders {k}" for k in chart.keys() - kustomized.keys()]
    lines += [f"only kustomize renders {k}" for k in kustomized.keys() - chart.keys()]
    for k in sorted(chart.keys() & kustomized.keys()):
        lines += [f"{k} {path}: chart {a!r}, kustomize {b!r}" for path, a, b in _field_differences(chart[k], kustomized[k])]
    return lines


def _field_differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(a.keys() | b.keys(), key=str)
                for d in _field_differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _field_differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path or ".", a, b)]
