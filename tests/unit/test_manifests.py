"""The shipped manifests are valid Kubernetes objects and carry a valid configuration."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from webhook import config

MANIFESTS = Path(__file__).parents[2] / "manifests"
K8S_VERSION = "1.36.0"
# Component configuration, not API objects: a component reads them (--config), kubectl does not apply them.
# They are loaded and checked by the tests of the component that uses them (tests/unit/test_extender.py).
CONFIG_KINDS = {"KubeSchedulerConfiguration"}


def is_config(path):
    return any(d and d.get("kind") in CONFIG_KINDS for d in yaml.safe_load_all(path.read_text()))


def documents():
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") not in {"Kustomization", *CONFIG_KINDS}:
                yield pytest.param(document, id=f"{path.relative_to(MANIFESTS)}:{document['kind']}")


@pytest.mark.parametrize("document", list(documents()))
def test_manifest_is_valid_kubernetes(document):
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"])
    files = {str(p.relative_to(MANIFESTS)) for p in MANIFESTS.rglob("*.yaml")
             if p.name != "kustomization.yaml" and not is_config(p)}
    assert listed == files


def test_shipped_configmap_holds_a_valid_config():
    configmap = yaml.safe_load((MANIFESTS / "config.yaml").read_text())
    settings = config.from_configmap(configmap)
    assert settings.scheduler_name == "gpu-scheduler"


def test_webhook_configuration_selects_opted_in_namespaces_and_spares_opted_out_pods():
    hook = yaml.safe_load((MANIFESTS / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())["webhooks"][0]
    assert hook["namespaceSelector"] == {"matchLabels": {"gpu-scheduler.io/inject": "enabled"}}
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "gpu-scheduler.io/inject", "operator": "NotIn", "values": ["disabled"]}
    ]
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    assert hook["clientConfig"]["service"]["path"] == "/mutate"
