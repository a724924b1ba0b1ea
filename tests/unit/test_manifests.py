"""The shipped manifests are valid Kubernetes objects and carry a valid configuration."""

import functools
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from webhook import config

MANIFESTS = Path(__file__).parents[2] / "manifests"
BASE = MANIFESTS / "base"
COMPONENTS = MANIFESTS / "components"
K8S_VERSION = "1.36.0"
# Component configuration, not API objects: a component reads them (--config), kubectl does not apply them.
# They are loaded and checked by the tests of the component that uses them (tests/unit/test_extender.py).
CONFIG_KINDS = {"KubeSchedulerConfiguration"}
# Custom resources (Prometheus Operator, cert-manager): no schema in kubernetes-validate; the Prometheus
# ones are checked by shape below, cert-manager's by the real apiserver with its CRDs (tests/e2e).
CRD_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")
# Given to the cluster's own kube-scheduler with --config, not through a kustomization.
STANDALONE_CONFIG = "components/extender/kube-scheduler-extender-config.yaml"
KUSTOMIZE_KINDS = {"Kustomization", "Component"}


def kustomizations():
    return [(k.parent, yaml.safe_load(k.read_text())) for k in MANIFESTS.rglob("kustomization.yaml")]


def patch_files():
    """Patches of the components (a partial object, a list of JSON patch operations): checked once merged
    (tests/e2e)."""
    return {(base / patch["path"]).resolve() for base, k in kustomizations() for patch in k.get("patches", [])
            if "path" in patch}


def is_config(path):
    return any(d and d.get("kind") in CONFIG_KINDS for d in yaml.safe_load_all(path.read_text()))


def documents():
    patches = patch_files()
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.resolve() in patches:
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if (document and document.get("kind") not in {*KUSTOMIZE_KINDS, *CONFIG_KINDS}
                    and not str(document.get("apiVersion", "")).startswith(CRD_GROUPS)):
                yield pytest.param(document, id=f"{path.relative_to(MANIFESTS)}:{document['kind']}")


@pytest.mark.parametrize("document", list(documents()))
def test_manifest_is_valid_kubernetes(document):
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_kustomizations_list_every_manifest():
    """The base, the components and manifests/monitoring together use every file (as a resource, a patch or a
    generator's input); the one exception is the configuration for a cluster's own kube-scheduler."""
    listed = {STANDALONE_CONFIG}
    for base, kustomization in kustomizations():
        used = [*kustomization.get("resources", []), *(p["path"] for p in kustomization.get("patches", []) if "path" in p),
                *(f.split("=")[-1] for g in kustomization.get("configMapGenerator", []) for f in g.get("files", []))]
        for entry in used:
            if (base / entry).is_file():
                listed.add(str((base / entry).resolve().relative_to(MANIFESTS)))
    files = {str(p.relative_to(MANIFESTS)) for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert listed == files


def test_every_component_is_installed_by_an_entry_point():
    components = {base for base, k in kustomizations() if k["kind"] == "Component"}
    assert components == {d for d in COMPONENTS.iterdir() if d.is_dir()}
    installed = {(base / c).resolve() for base, k in kustomizations() if k["kind"] == "Kustomization"
                 for c in k.get("components", [])}
    assert components == installed


def patches():
    """Every patch of every kustomization, as (where, documents): a file's, or an inline one's."""
    for base, kustomization in kustomizations():
        for patch in kustomization.get("patches", []):
            text = (base / patch["path"]).read_text() if "path" in patch else patch["patch"]
            yield pytest.param([d for d in yaml.safe_load_all(text) if d],
                               id=f"{base.relative_to(MANIFESTS)}:{patch.get('path') or patch['target']['name']}")


@pytest.mark.parametrize("documents", list(patches()))
def test_patches_only_add(documents):
    """Components compose by adding: no `$patch: delete` (kubectl v1.32's kustomize panics on a deleted object,
    tests/e2e/test_manifests_apply.py builds every entry point with it) and no JSON patch that removes or
    replaces, so an entry point installs exactly the union of what its components list."""
    for document in documents:
        operations = document if isinstance(document, list) else []
        assert all(op["op"] == "add" for op in operations), operations
        assert "$patch" not in yaml.safe_dump(document)


def test_service_monitors_select_services_that_expose_the_named_port():
    services = [d for p in MANIFESTS.rglob("*.yaml") for d in yaml.safe_load_all(p.read_text())
                if isinstance(d, dict) and d.get("kind") == "Service"]  # a JSON patch file holds a list
    monitors = list(yaml.safe_load_all((MANIFESTS / "monitoring" / "servicemonitors.yaml").read_text()))
    assert len(monitors) == 3
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if wanted.items() <= s["metadata"].get("labels", {}).items()]
        assert matching, monitor["metadata"]["name"]
        ports = {port["name"] for s in matching for port in s["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def monitoring_expressions():
    """Every PromQL expression shipped: the dashboard's panels' and the PrometheusRule's."""
    import json

    configmap = yaml.safe_load((MANIFESTS / "monitoring" / "dashboard.yaml").read_text())
    dashboard = json.loads(configmap["data"]["gpu-scheduler.json"])
    rules = yaml.safe_load((MANIFESTS / "monitoring" / "rules.yaml").read_text())
    return ([target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
            + [rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]])


def test_dashboard_and_alerts_query_only_metrics_the_components_export():
    import re

    root = MANIFESTS.parent
    sources = "".join((root / f).read_text() for f in (
        "webhook/metrics.py", "gpu_scheduler/runtime/metrics.py", "gpu_scheduler/runtime/model_metrics.py",
        "gpu_scheduler/runtime/extender.py", "gpu_scheduler/runtime/plugins/utilization.py",
        "gpu_scheduler/watching.py"))
    exported = set(re.findall(r'"(gpu_scheduler_[a-z_]+)"', sources))
    queried = {name for expr in monitoring_expressions() for name in re.findall(r"gpu_scheduler_[a-z_]+", expr)}
    assert queried
    for name in queried:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert base in exported or re.sub(r"_total$", "", base) in exported, f"{name} is not exported"


def test_shipped_configmap_holds_a_valid_config():
    configmap = yaml.safe_load((BASE / "config.yaml").read_text())
    settings = config.from_configmap(configmap)
    assert settings.scheduler_name == "gpu-scheduler"


def test_webhook_configuration_selects_opted_in_namespaces_and_spares_opted_out_pods():
    hook = yaml.safe_load((COMPONENTS / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())["webhooks"][0]
    assert hook["namespaceSelector"] == {
        "matchLabels": {"gpu-scheduler.io/inject": "enabled"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "gpu-scheduler-system"]}],
    }
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 10
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "gpu-scheduler.io/inject", "operator": "NotIn", "values": ["disabled"]}
    ]
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    assert hook["clientConfig"]["service"]["path"] == "/mutate"


def test_the_standalone_scheduler_may_list_and_watch_all_it_watches():
    """Each watch `gpu-scheduler run` keeps is granted list and watch by its ClusterRole (tests/e2e/test_rbac.py asks
    the real apiserver)."""
    from kubernetes import client

    from gpu_scheduler.runtime import running

    live = running.LiveScheduler(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), config.Config())
    live.stop()
    watched = _watched(live.watches.reflectors)
    selectors = {("", "services"), ("", "replicationcontrollers"), ("apps", "replicasets"), ("apps", "statefulsets")}
    storage = {("", "persistentvolumeclaims"), ("", "persistentvolumes"), ("storage.k8s.io", "storageclasses"),
               ("storage.k8s.io", "csinodes"), ("storage.k8s.io", "csidrivers"),
               ("storage.k8s.io", "csistoragecapacities"), ("storage.k8s.io", "volumeattachments")}
    groups = {("scheduling.x-k8s.io", "podgroups"), ("scheduling.k8s.io", "podgroups"),
              ("scheduling.volcano.sh", "podgroups")}
    dra = {("resource.k8s.io", "resourceslices"), ("resource.k8s.io", "deviceclasses"),
           ("resource.k8s.io", "resourceclaims")}
    assert selectors | storage | groups | dra | {("policy", "poddisruptionbudgets")} <= watched
    assert watched <= _granted(COMPONENTS / "scheduler" / "rbac.yaml")


def test_the_extender_may_list_and_watch_all_it_watches():
    """The same for `gpu-scheduler extender`, whose PodDisruptionBudget watch serves /preempt."""
    from kubernetes import client

    from gpu_scheduler.runtime import extender

    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    served = extender.Extender(config.Config(), core=client.CoreV1Api(api))
    served.stop()
    watched = _watched(served.cluster_watches().reflectors)
    assert {("", "nodes"), ("", "pods"), ("", "namespaces"), ("policy", "poddisruptionbudgets")} <= watched
    assert watched <= _granted(COMPONENTS / "extender" / "extender.yaml")


def _watched(reflectors):
    """(API group, resource) of what each reflector lists and watches, from its list call."""
    from kubernetes import client

    groups = {client.AppsV1Api: "apps", client.StorageV1Api: "storage.k8s.io", client.PolicyV1Api: "policy",
              client.ResourceV1Api: "resource.k8s.io"}
    calls = [reflector._list_call for reflector in reflectors]
    custom = {(call.args[0], call.args[2]) for call in calls if isinstance(call, functools.partial)}  # group, plural
    return custom | {(groups.get(type(call.__self__), ""),
                      _plural(call.__name__.removeprefix("list_").removesuffix("_for_all_namespaces").replace("_", "")))
                     for call in calls if not isinstance(call, functools.partial)}


def _granted(path):
    """(API group, resource) pairs the ClusterRole in `path` grants both list and watch on."""
    role = next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "ClusterRole")
    return {(group, resource) for rule in role["rules"] if {"list", "watch"} <= set(rule["verbs"])
            for group in rule["apiGroups"] for resource in rule["resources"]}


def _plural(kind: str) -> str:
    """The resource name of a lowercase kind: storageclass -> storageclasses, csistoragecapacity -> ...ies."""
    return kind + "es" if kind.endswith("s") else kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
