"""The Helm chart against the kustomize tree, its values schema and the checks people run on charts, with the real
helm (no control plane: tests/e2e/test_helm_install.py installs it).

One source of truth: for each kustomize entry point, the chart with the equal settings renders the same objects,
field by field (tests/e2e/chart.py says what is left out of the comparison and why).
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from tests.e2e import chart, helm, kubescore
from tests.e2e.installing import NAMESPACE

K8S_VERSION = "1.36.0"
CUSTOM_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")
MONITORING = ("monitoring.serviceMonitors.enabled=true", "monitoring.rules.enabled=true",
              "monitoring.dashboard.enabled=true")
# Everything a platform team sets at once: it must still render valid objects.
EVERYTHING = {
    "image": {"repository": "registry.example.com/gpu-scheduler", "digest": "sha256:" + "ab" * 32,
              "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "priorityClassName": "system-cluster-critical",
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    "podAnnotations": {"example.com/team": "platform"},
    "webhook": {"replicas": 3, "namespaces": ["research", "inference"], "failurePolicy": "Fail"},
    "scheduler": {"extraVolumes": [{"name": "prometheus-token", "secret": {"secretName": "prometheus-token"}}],
                  "extraVolumeMounts": [{"name": "prometheus-token", "mountPath": "/var/run/prometheus"}]},
    "monitoring": {"serviceMonitors": {"enabled": True, "labels": {"release": "prometheus"}},
                   "rules": {"enabled": True}, "dashboard": {"enabled": True, "namespace": "grafana"}},
}


@pytest.fixture(scope="module", autouse=True)
def binaries():
    helm.require_binaries()


@pytest.mark.parametrize(("entry_point", "settings"), [
    (".", ()),
    ("overlays/extender", ("mode=extender",)),
    ("overlays/cert-manager", ("certificates.source=cert-manager",)),
])
def test_the_chart_renders_what_each_kustomize_entry_point_installs(entry_point, settings):
    kustomized = chart.comparable([d for d in chart.kustomize(entry_point) if d["kind"] != "Namespace"])
    rendered = chart.comparable(chart.render(*settings))
    assert chart.differences(rendered, kustomized) == []


@pytest.mark.parametrize(("mode", "monitored"), [("standalone", "gpu-scheduler"),
                                                 ("extender", "gpu-scheduler-extender")])
def test_the_chart_renders_manifests_monitoring_for_the_components_it_installs(mode, monitored):
    """manifests/monitoring has a ServiceMonitor for both schedulers; the chart only for the one its mode installs."""
    unmonitored = {"gpu-scheduler", "gpu-scheduler-extender"} - {monitored}
    kustomized = chart.comparable([d for d in chart.kustomize("monitoring")
                                   if not (d["kind"] == "ServiceMonitor" and d["metadata"]["name"] in unmonitored)])
    rendered = chart.comparable(chart.render(f"mode={mode}", *MONITORING))
    monitoring = {k: v for k, v in rendered.items() if k[0].startswith("monitoring.coreos.com/")
                  or k[3] == "gpu-scheduler-dashboard"}
    assert chart.differences(monitoring, kustomized) == []


@pytest.mark.parametrize("settings", [(), ("mode=extender",), ("certificates.source=cert-manager",), MONITORING])
def test_every_object_is_namespaced_from_the_release(settings):
    """Installed into another namespace, the objects are the same with that namespace wherever the default one
    was: in metadata, arguments, RBAC subjects, the webhook's service and selector, DNS names, kube-scheduler's
    configuration. kube-system stays where it is (the authentication reader's binding)."""
    elsewhere = chart.comparable(chart.render(*settings, namespace="team-gpu"))
    here = chart.comparable(chart.render(*settings))
    moved = {chart.key(d): d for d in (json.loads(json.dumps(d).replace(NAMESPACE, "team-gpu"))
                                       for d in here.values())}
    assert chart.differences(elsewhere, moved) == []


@pytest.mark.parametrize("settings", [(), ("mode=extender",), ("certificates.source=cert-manager",)])
def test_the_chart_passes_helm_lint_strict(settings):
    args = [a for s in settings for a in ("--set", s)]
    out = helm.helm("lint", "--strict", chart.CHART, *args, *(a for s in MONITORING for a in ("--set", s))).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize("mode", ["standalone", "extender"])
def test_every_setting_at_once_renders_strictly_valid_objects(mode):
    documents = chart.render(f"mode={mode}", values=EVERYTHING)
    for document in documents:
        if not str(document["apiVersion"]).startswith(CUSTOM_GROUPS):
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    pods = {d["metadata"]["name"]: d["spec"]["template"] for d in documents if d["kind"] == "Deployment"}
    for name, template in pods.items():
        spec = template["spec"]
        assert spec["priorityClassName"] == "system-cluster-critical", name
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        assert spec["tolerations"] == EVERYTHING["tolerations"] and spec["affinity"] == EVERYTHING["affinity"], name
        assert template["metadata"]["annotations"] == {"example.com/team": "platform"}, name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
    ours = [c for t in pods.values() for c in t["spec"]["containers"] + t["spec"].get("initContainers", [])
            if c["name"] != "kube-scheduler"]
    assert {c["image"] for c in ours} == {"registry.example.com/gpu-scheduler@sha256:" + "ab" * 32}
    hook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0]
    assert hook["failurePolicy"] == "Fail"
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research", "inference"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}]}
    dashboard = next(d for d in documents if d["metadata"]["name"] == "gpu-scheduler-dashboard")
    assert dashboard["metadata"]["namespace"] == "grafana"
    monitors = [d for d in documents if d["kind"] == "ServiceMonitor"]
    assert monitors and all(m["metadata"]["labels"]["release"] == "prometheus" for m in monitors)


def test_an_existing_configmap_replaces_the_charts_own():
    documents = chart.render("existingConfigMap=team-gpu-rules")
    assert "gpu-scheduler-config" not in {d["metadata"]["name"] for d in documents if d["kind"] == "ConfigMap"}
    args = [a for d in documents if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
            for a in c.get("args", []) if a.startswith("--config-map=")]
    assert args == [f"--config-map={NAMESPACE}/team-gpu-rules"] * 2
    names = {n for d in documents if d["kind"] == "Role" for r in d["rules"] if r["resources"] == ["configmaps"]
             for n in r["resourceNames"]}
    assert names == {"team-gpu-rules"}


def test_the_default_rules_are_the_shipped_configuration_and_it_is_valid():
    from webhook import config

    configmap = next(d for d in chart.render() if d["metadata"]["name"] == "gpu-scheduler-config")
    assert config.from_configmap(configmap).scheduler_name == "gpu-scheduler"


# (values, what helm must say): the schema's and the templates' own checks.
REFUSED = [
    ({"mode": "scheduler"}, "at '/mode': value must be one of 'standalone', 'extender'"),
    ({"webhook": {"replicas": 0}}, "at '/webhook/replicas': minimum: got 0, want 1"),
    ({"webhook": {"failurePolicy": "ignore"}}, "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"),
    ({"webhook": {"timeout": 5}}, "at '/webhook': additional properties 'timeout' not allowed"),
    ({"webhook": {"namespaces": ["Research"]}}, "at '/webhook/namespaces/0': 'Research' does not match pattern"),
    ({"webhook": {"namespaces": ["kube-system"]}}, 'webhook.namespaces: "kube-system" is never mutated'),
    ({"webhook": {"namespaces": [NAMESPACE]}}, f'webhook.namespaces: "{NAMESPACE}" is never mutated'),
    ({"webhook": {"replicas": 1}}, "webhook.podDisruptionBudget.minAvailable (1) must be below the replicas (1)"),
    ({"scheduler": {"podDisruptionBudget": {"minAvailable": 2}}},
     "scheduler.podDisruptionBudget.minAvailable (2) must be below the replicas (2)"),
    ({"certificates": {"source": "vault"}}, "at '/certificates/source': value must be one of"),
    ({"certificates": {"renewEvery": "12 hours"}}, "at '/certificates/renewEvery': '12 hours' does not match"),
    ({"image": {"digest": "latest"}}, "at '/image/digest': 'latest' does not match pattern"),
    ({"scheduler": {"resources": {"limits": {"memory": "1 GiB"}}}},
     "at '/scheduler/resources/limits/memory': '1 GiB' does not match pattern"),
    ({"config": {"schedulerNmae": "x"}}, "at '/config': additional properties 'schedulerNmae' not allowed"),
    ({"monitoring": {"serviceMonitors": {"interval": "30"}}},
     "at '/monitoring/serviceMonitors/interval': '30' does not match pattern"),
    ({"tolerations": {"key": "x"}}, "at '/tolerations': got object, want array"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED, ids=[json.dumps(v) for v, _ in REFUSED])
def test_a_wrong_value_fails_the_install_with_a_clear_message(values, message):
    result = helm.helm("template", chart.RELEASE, chart.CHART, "--values", "-", stdin=yaml.safe_dump(values),
                       check=False, namespace=NAMESPACE)
    assert result.returncode != 0
    assert message in result.stderr


def test_the_packaged_chart_carries_the_linked_monitoring_files(tmp_path):
    """`helm package` copies in what files/ links to, so a chart from a repository renders the same objects."""
    helm.helm("package", chart.CHART, "--destination", tmp_path)
    [package] = tmp_path.glob("gpu-scheduler-*.tgz")
    args = [a for s in MONITORING for a in ("--set", s)]
    packaged = helm.helm("template", chart.RELEASE, package, *args, namespace=NAMESPACE).stdout
    assert [d for d in yaml.safe_load_all(packaged) if d] == chart.render(*MONITORING)


# kube-score's checks we answer by design, not by changing the chart (docs/install.md lists them too).
IGNORED = {
    "container-image-pull-policy": "IfNotPresent: the image is a version tag or a digest (image.digest); "
                                   "image.pullPolicy=Always for tags that move",
    "container-ephemeral-storage-request-and-limit": "nothing is written to the node's disk: read-only root "
                                                     "filesystem, /tmp in memory",
    "pod-probes": "the scheduler's Service serves metrics only, a standby's as the leader's: there is no traffic "
                  "for a readiness probe to hold back (the webhook and the extender have one)",
}
# Warnings (kube-score exits 0 on them) we accept, each for the objects it names.
ACCEPTED_WARNINGS = {
    "deployment-has-host-podantiaffinity": "spread by topologySpreadConstraints over kubernetes.io/hostname, "
                                           "which kube-score does not read",
    "pod-networkpolicy": "ingress is limited to each serving port; egress stays open, as the apiserver's and "
                         "Prometheus' addresses are the cluster's",
    "deployment-replicas": "the extender runs one replica, its model is what keeps two pods off one GPU",
    "deployment-strategy": "the extender's Recreate: never two models at once",
}


@pytest.mark.parametrize("settings", [(), ("mode=extender",)], ids=["standalone", "extender"])
def test_kube_score_finds_nothing_critical_and_only_the_warnings_we_accept(settings):
    """kube-score's best-practice checks (no CPU limits by choice: kube-score's own --ignore-container-cpu-limit,
    as CPU limits throttle the webhook on the admission path)."""
    flags = ["--kubernetes-version", "v1.36", "--ignore-container-cpu-limit",
             *(f for check in IGNORED for f in ("--ignore-test", check))]
    status, found = kubescore.findings(chart.render(*settings), *flags)
    assert [f for f in found if f[2] != kubescore.WARNING] == []
    assert {f[1] for f in found} <= ACCEPTED_WARNINGS.keys(), found
    assert status == 0
