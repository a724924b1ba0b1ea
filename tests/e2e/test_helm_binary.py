"""The helm that hack/helm.sh builds is the release it names and renders a chart; no control plane needed."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.e2e import helm

CHART = {
    "Chart.yaml": """\
apiVersion: v2
name: demo
description: A chart with one ConfigMap
type: application
version: 0.1.0
appVersion: "1.0"
""",
    "values.yaml": """\
greeting: hello
""",
    "templates/configmap.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
  namespace: {{ .Release.Namespace }}
data:
  greeting: {{ .Values.greeting | quote }}
""",
}


def _write_chart(directory: Path) -> Path:
    for name, text in CHART.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def test_the_built_helm_is_the_named_release_and_lints_and_renders_a_chart(tmp_path):
    helm.require_binaries()
    chart = _write_chart(tmp_path / "demo")

    assert helm.helm("version", "--template", "{{.Version}}").stdout == helm.HELM_VERSION
    assert "1 chart(s) linted, 0 chart(s) failed" in helm.helm("lint", chart).stdout
    rendered = helm.helm("template", "demo", chart, "--set", "greeting=hi there", namespace="team-a").stdout
    assert list(yaml.safe_load_all(rendered)) == [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "demo-settings", "namespace": "team-a"},
        "data": {"greeting": "hi there"},
    }]
