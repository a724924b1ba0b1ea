"""The mutation decision: which pods are patched, with what, and that every patch applies.

Every patch produced here is applied with jsonpatch to the pod it was made for, the result
is validated strictly against the Kubernetes 1.36 schema, and deciding again on the
result must yield an empty patch (the apiserver may re-run admission; we must be stable).
"""

import copy
from fractions import Fraction

import jsonpatch
import kubernetes_validate
import pytest

from webhook import config, patches

K8S_VERSION = "1.36.0"

SETTINGS = config.parse(
    {
        "schedulerName": "gpu-scheduler",
        "admission": {
            "gpuResources": ["nvidia.com/gpu", "example.com/vgpu"],
            "deletionCost": {"initial": -50},
            "rules": [
                {
                    "name": "research-training",
                    "namespaceSelector": {"matchLabels": {"team": "research"}},
                    "podSelector": {"matchLabels": {"job-type": "training"}},
                    "minGPUs": 2,
                    "set": {"gpuModel": "A100", "gpuMemoryMiB": 40960, "deletionCost": -100,
                            "annotations": {"example.com/owner": "x"}, "labels": {"tier": "gold"}},
                },
                {
                    "name": "shares",
                    "maxGPUs": 0,
                    "set": {"spot": "prefer"},
                },
                {"name": "any-gpu", "set": {}},
            ],
        },
    }
)


def pod(*, gpus="1", where="limits", annotations=None, labels=None, scheduler=None, node=None,
        init=False, sidecar=False, generate_name=False, resource="nvidia.com/gpu"):
    resources = {where: {resource: gpus}} if gpus is not None else {}
    main = {"name": "main", "image": "busybox"}
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "job-"} if generate_name else {"name": "p", "namespace": "ns"},
        "spec": {"containers": [main]},
    }
    target = main
    if init or sidecar:
        side = {"name": "init", "image": "busybox"}
        if sidecar:
            side["restartPolicy"] = "Always"
        obj["spec"]["initContainers"] = [side]
        target = side
    if resources:
        target["resources"] = resources
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    if labels is not None:
        obj["metadata"]["labels"] = labels
    if scheduler is not None:
        obj["spec"]["schedulerName"] = scheduler
    if node is not None:
        obj["spec"]["nodeName"] = node
    return obj


def decide(obj, namespace_labels=None, settings=SETTINGS):
    return patches.decide(obj, namespace_labels=namespace_labels or {}, settings=settings)


def applied(obj, decision, namespace_labels=None, settings=SETTINGS):
    """Apply, validate, and check that deciding again on the result changes nothing."""
    before = copy.deepcopy(obj)
    result = jsonpatch.apply_patch(obj, decision.patch)
    assert obj == before, "the patch must not change the input"
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    again = patches.decide(result, namespace_labels=namespace_labels or {}, settings=settings)
    assert again.patch == [] and again.rule == decision.rule
    return result


@pytest.mark.parametrize(
    "obj",
    [
        pod(),
        pod(where="requests"),
        pod(init=True),
        pod(sidecar=True),
        pod(resource="example.com/vgpu"),
        pod(gpus=None, annotations={"gpu-scheduler.io/gpu-milli": "250"}),
        pod(generate_name=True),
        pod(annotations={}),
        pod(annotations={"keep": "me"}),
        pod(labels={}),
        pod(scheduler="default-scheduler"),
        pod(scheduler=""),
    ],
    ids=["limits", "requests", "init-container", "sidecar", "other-gpu-resource", "gpu-share",
         "generateName", "empty-annotations", "some-annotations", "empty-labels", "default-scheduler",
         "empty-scheduler"],
)
def test_every_kind_of_gpu_pod_is_patched(obj):
    decision = decide(obj)
    assert decision.patch, decision.reason
    result = applied(obj, decision)
    assert result["spec"]["schedulerName"] == "gpu-scheduler"
    annotations = result["metadata"]["annotations"]
    assert annotations["gpu-scheduler.io/rule"] == decision.rule
    assert annotations["controller.kubernetes.io/pod-deletion-cost"] in ("-50", "-100")


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (pod(gpus=None), "not a GPU pod"),
        (pod(gpus="0"), "not a GPU pod"),
        (pod(resource="cpu"), "not a GPU pod"),
        (pod(gpus=None, annotations={"gpu-scheduler.io/gpu-milli": "0"}), "not a GPU pod"),
        (pod(gpus=None, annotations={"gpu-scheduler.io/gpu-milli": "half"}), "not a GPU pod"),
        (pod(gpus="lots"), "not a GPU pod"),
        (pod(node="node-1"), "already assigned to node node-1"),
        (pod(scheduler="volcano"), "pod names scheduler 'volcano'"),
    ],
)
def test_pods_left_alone(obj, reason):
    decision = decide(obj)
    assert decision.patch == [] and decision.rule is None
    assert decision.reason == reason


def test_override_takes_pods_from_other_schedulers():
    settings = config.parse({"admission": {"overrideSchedulerName": True, "rules": [{"name": "all"}]}})
    decision = decide(pod(scheduler="volcano"), settings=settings)
    assert applied(pod(scheduler="volcano"), decision, settings=settings)["spec"]["schedulerName"] == "gpu-scheduler"


def test_first_matching_rule_wins_and_sets_everything():
    obj = pod(gpus="2", labels={"job-type": "training"})
    decision = decide(obj, {"team": "research"})
    assert decision.rule == "research-training"
    assert decision.gpus == Fraction(2)
    result = jsonpatch.apply_patch(obj, decision.patch)
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    assert result["metadata"]["annotations"] == {
        "gpu.nvidia.com/model": "A100",
        "gpu.nvidia.com/memory": "40960",
        "example.com/owner": "x",
        "controller.kubernetes.io/pod-deletion-cost": "-100",
        "gpu-scheduler.io/initial-deletion-cost": "-100",
        "gpu-scheduler.io/rule": "research-training",
    }
    assert result["metadata"]["labels"] == {"job-type": "training", "tier": "gold"}
    assert {"op": "add", "path": "/metadata/labels/tier", "value": "gold"} in decision.patch


@pytest.mark.parametrize(
    ("gpus", "labels", "namespace_labels", "rule"),
    [
        ("2", {"job-type": "training"}, {"team": "research"}, "research-training"),
        ("1", {"job-type": "training"}, {"team": "research"}, "any-gpu"),  # below minGPUs
        ("2", {"job-type": "serving"}, {"team": "research"}, "any-gpu"),  # pod selector
        ("2", {"job-type": "training"}, {"team": "web"}, "any-gpu"),  # namespace selector
        ("2", {"job-type": "training"}, None, "any-gpu"),  # namespace labels unknown
    ],
)
def test_rule_selection(gpus, labels, namespace_labels, rule):
    decision = patches.decide(pod(gpus=gpus, labels=labels), namespace_labels=namespace_labels, settings=SETTINGS)
    assert decision.rule == rule
    assert decision.namespace_unknown is (namespace_labels is None)


@pytest.mark.parametrize(
    ("gpus", "labels", "namespace_labels", "why"),
    [
        ("1", {"job-type": "training"}, {"team": "research"}, "minGPUs 2: the pod asks for 1 GPU"),
        ("2", {"job-type": "serving"}, {"team": "research"},
         "podSelector job-type=training: the pod has job-type=serving"),
        ("2", {}, {"team": "research"}, "podSelector job-type=training: the pod has no job-type"),
        ("2", {"job-type": "training"}, {"team": "web", "env": "prod"},
         "namespaceSelector team=research: the namespace has team=web"),
        ("2", {"job-type": "training"}, {}, "namespaceSelector team=research: the namespace has no team"),
        ("2", {"job-type": "training"}, None, "namespaceSelector team=research: the namespace's labels are not known"),
    ],
)
def test_each_rule_skipped_before_the_match_says_why(gpus, labels, namespace_labels, why):
    decision = patches.decide(pod(gpus=gpus, labels=labels), namespace_labels=namespace_labels, settings=SETTINGS)
    assert decision.skipped[0] == ("research-training", why)
    lines = decision.explanation()
    assert (lines[0], lines[-1]) == (f"rule 'research-training' skipped: {why}", "matched rule 'any-gpu'")
    assert len(lines) == len(decision.skipped) + 1


def test_max_gpus_and_shares_read_as_gpu_counts():
    settings = config.parse({"admission": {"rules": [{"name": "small", "maxGPUs": 1}, {"name": "big", "minGPUs": 2},
                                                     {"name": "rest"}]}})
    share = pod(gpus=None, annotations={"gpu-scheduler.io/gpu-milli": "250"})
    assert patches.decide(share, namespace_labels={}, settings=settings).skipped == ()
    decision = patches.decide(pod(gpus="4"), namespace_labels={}, settings=settings)
    assert decision.skipped == (("small", "maxGPUs 1: the pod asks for 4 GPUs"),)
    decision = patches.decide(share, namespace_labels={}, settings=config.parse(
        {"admission": {"rules": [{"name": "big", "minGPUs": 1}]}}))
    assert (decision.rule, decision.skipped) == (None, (("big", "minGPUs 1: the pod asks for 0.25 GPUs"),))


def test_a_gpu_share_counts_as_a_fraction_of_a_gpu():
    decision = decide(pod(gpus=None, annotations={"gpu-scheduler.io/gpu-milli": "500"}))
    assert decision.gpus == Fraction(1, 2)
    assert decision.rule == "any-gpu"  # maxGPUs 0 excludes it from "shares"


def test_values_the_pod_already_has_are_never_overwritten():
    obj = pod(
        gpus="2",
        labels={"job-type": "training", "tier": "bronze"},
        annotations={
            "gpu.nvidia.com/model": "H100",
            "controller.kubernetes.io/pod-deletion-cost": "7",
        },
    )
    result = applied(obj, decide(obj, {"team": "research"}), {"team": "research"})
    annotations = result["metadata"]["annotations"]
    assert annotations["gpu.nvidia.com/model"] == "H100"
    assert annotations["controller.kubernetes.io/pod-deletion-cost"] == "7"
    assert annotations["gpu.nvidia.com/memory"] == "40960"
    assert result["metadata"]["labels"]["tier"] == "bronze"


def test_missing_maps_are_added_whole_and_keys_are_escaped():
    decision = decide(pod(gpus="2", labels={"job-type": "training"}), {"team": "research"})
    assert decision.patch[1]["path"] == "/metadata/annotations"
    obj = pod(gpus="2", labels={"job-type": "training"}, annotations={"x": "y"})
    paths = [op["path"] for op in decide(obj, {"team": "research"}).patch]
    assert "/metadata/annotations/gpu.nvidia.com~1model" in paths
    assert "/metadata/annotations/example.com~1owner" in paths
    assert "/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost" in paths


def test_null_maps_are_replaced_whole():
    obj = pod()
    obj["metadata"]["annotations"] = None
    obj["metadata"]["labels"] = None
    decision = decide(obj)
    assert {"op": "add", "path": "/metadata/annotations",
            "value": {"controller.kubernetes.io/pod-deletion-cost": "-50",
                      "gpu-scheduler.io/initial-deletion-cost": "-50", "gpu-scheduler.io/rule": "any-gpu"}} \
        in decision.patch
    jsonpatch.apply_patch(obj, decision.patch)


def test_a_pod_already_ours_only_gets_what_it_lacks():
    obj = pod(scheduler="gpu-scheduler")
    decision = decide(obj)
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations"]


def test_no_rule_no_patch():
    settings = config.parse({"admission": {"rules": [{"name": "big", "minGPUs": 4}]}})
    decision = decide(pod(), settings=settings)
    assert decision.patch == [] and decision.reason == "no rule matched"


@pytest.mark.parametrize(("key", "escaped"), [("a/b", "a~1b"), ("a~b", "a~0b"), ("~/", "~0~1"), ("plain", "plain")])
def test_escape(key, escaped):
    assert patches.escape(key) == escaped
