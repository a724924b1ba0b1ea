"""`set.podGroup`: a rule forms a gang from the pod's own label or annotation, and the scheduler reads it.

Every patch is applied to the pod it was made for, validated strictly against the Kubernetes 1.36 schema, and
deciding again on the result must change nothing (the apiserver may re-run admission).
"""

import copy
import json

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from scheduler_core import podgroups, pods
from tests.commands import gpu_scheduler
from webhook import config, patches

K8S_VERSION = "1.36.0"
GROUP, MIN_MEMBER = podgroups.GROUP_ANNOTATION, podgroups.MIN_MEMBER_ANNOTATION
JOB_LABEL = "training.kubeflow.org/job-name"

RULES = {
    "rules": [
        {"name": "fixed", "podSelector": {"matchLabels": {"rule": "fixed"}},
         "set": {"podGroup": {"nameFrom": {"label": JOB_LABEL}, "minMember": 8}, "labels": {"tier": "gold"}}},
        {"name": "from-annotations", "podSelector": {"matchLabels": {"rule": "from-annotations"}},
         "set": {"podGroup": {"nameFrom": {"annotation": "example.com/gang"},
                              "minMemberFrom": {"annotation": "example.com/replicas"}}}},
        {"name": "from-labels", "podSelector": {"matchLabels": {"rule": "from-labels"}},
         "set": {"podGroup": {"nameFrom": {"label": "job"}, "minMemberFrom": {"label": "replicas"}}}},
        {"name": "any-gpu"},
    ]
}
SETTINGS = config.parse({"admission": RULES})


def pod(rule, *, labels=None, annotations=None):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker-0", "namespace": "ml", "labels": {"rule": rule, **(labels or {})},
                     **({"annotations": annotations} if annotations is not None else {})},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def admitted(obj):
    """The decision, and the pod as the apiserver stores it after our patch."""
    before = copy.deepcopy(obj)
    decision = patches.decide(obj, namespace_labels={}, settings=SETTINGS)
    result = jsonpatch.apply_patch(obj, decision.patch)
    assert obj == before, "the patch must not change the input"
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    again = patches.decide(result, namespace_labels={}, settings=SETTINGS)
    assert again.patch == [] and again.rule == decision.rule
    return decision, result


def group_annotations(obj):
    annotations = obj["metadata"].get("annotations") or {}
    return {key: annotations[key] for key in (GROUP, MIN_MEMBER) if key in annotations}


@pytest.mark.parametrize(
    ("obj", "expected", "note"),
    [
        (pod("fixed", labels={JOB_LABEL: "resnet"}), {GROUP: "resnet", MIN_MEMBER: "8"}, None),
        (pod("fixed", labels={JOB_LABEL: "resnet"}, annotations={"keep": "me"}),
         {GROUP: "resnet", MIN_MEMBER: "8"}, None),
        (pod("from-annotations", annotations={"example.com/gang": "bert", "example.com/replicas": "12"}),
         {GROUP: "bert", MIN_MEMBER: "12"}, None),
        (pod("from-labels", labels={"job": "bert", "replicas": "4"}), {GROUP: "bert", MIN_MEMBER: "4"}, None),
        # copied raw: the scheduler, not the webhook, reports a name or a count it cannot read
        (pod("from-annotations", annotations={"example.com/gang": "BERT", "example.com/replicas": "eight"}),
         {GROUP: "BERT", MIN_MEMBER: "eight"}, None),
        (pod("from-annotations", annotations={"example.com/gang": "bert", "example.com/replicas": ""}),
         {GROUP: "bert", MIN_MEMBER: ""}, None),
        # a count the pod already has stands; the name is still written
        (pod("fixed", labels={JOB_LABEL: "resnet"}, annotations={MIN_MEMBER: "3"}),
         {GROUP: "resnet", MIN_MEMBER: "3"}, None),
        (pod("fixed"), {}, f"set.podGroup: no group annotations: the pod has no label {JOB_LABEL} (nameFrom)"),
        (pod("fixed", labels={JOB_LABEL: ""}), {},
         f"set.podGroup: no group annotations: the pod's label {JOB_LABEL} (nameFrom) is empty"),
        (pod("from-annotations", annotations={"example.com/gang": "bert"}), {},
         "set.podGroup: no group annotations: the pod has no annotation example.com/replicas (minMemberFrom)"),
        (pod("from-labels", labels={"job": "bert"}, annotations={"example.com/replicas": "4"}), {},
         "set.podGroup: no group annotations: the pod has no label replicas (minMemberFrom)"),
        (pod("fixed", labels={JOB_LABEL: "resnet"}, annotations={GROUP: "mine"}), {GROUP: "mine"},
         f'set.podGroup: no group annotations: the pod already has {GROUP} "mine"'),
    ],
    ids=["fixed", "fixed-with-annotations", "from-annotations", "from-labels", "raw-values", "empty-count",
         "count-kept", "no-name", "empty-name", "no-count-annotation", "no-count-label", "group-kept"],
)
def test_the_rule_writes_both_group_annotations_or_neither(obj, expected, note):
    decision, result = admitted(obj)
    assert group_annotations(result) == expected
    assert result["metadata"]["annotations"]["gpu-scheduler.io/rule"] == decision.rule  # the rest of the rule applies
    assert decision.explanation()[-1] == (note or f"matched rule {decision.rule!r}")


def test_the_rest_of_the_rule_applies_without_a_group():
    _, result = admitted(pod("fixed"))
    assert result["metadata"]["labels"]["tier"] == "gold"
    assert result["spec"]["schedulerName"] == "gpu-scheduler"


def test_a_rule_without_pod_group_writes_no_group_annotations():
    decision, result = admitted(pod("other", labels={JOB_LABEL: "resnet", "job": "a", "replicas": "2"}))
    assert decision.rule == "any-gpu" and group_annotations(result) == {}


def test_keys_are_escaped_and_a_missing_map_is_added_whole():
    decision = patches.decide(pod("fixed", labels={JOB_LABEL: "resnet"}), namespace_labels={}, settings=SETTINGS)
    whole = next(op for op in decision.patch if op["path"] == "/metadata/annotations")
    assert (whole["op"], whole["value"][GROUP], whole["value"][MIN_MEMBER]) == ("add", "resnet", "8")
    decision = patches.decide(pod("fixed", labels={JOB_LABEL: "resnet"}, annotations={"keep": "me"}),
                              namespace_labels={}, settings=SETTINGS)
    assert {"op": "add", "path": "/metadata/annotations/gpu-scheduler.io~1pod-group", "value": "resnet"} \
        in decision.patch
    assert {"op": "add", "path": "/metadata/annotations/gpu-scheduler.io~1pod-group-min-member", "value": "8"} \
        in decision.patch
    assert {op["op"] for op in decision.patch} == {"add"}


@pytest.mark.parametrize(
    ("obj", "group", "min_member", "problem"),
    [
        (pod("fixed", labels={JOB_LABEL: "resnet"}), podgroups.GroupRef(podgroups.RULE, "ml", "resnet"), 8, None),
        (pod("from-annotations", annotations={"example.com/gang": "bert", "example.com/replicas": "12"}),
         podgroups.GroupRef(podgroups.RULE, "ml", "bert"), 12, None),
        (pod("from-annotations", annotations={"example.com/gang": "bert", "example.com/replicas": "eight"}),
         None, None, f'annotation {MIN_MEMBER}: "eight" is not a count from 1 to 100000 (the minMember of the '
                     f"group bert a rule formed)"),
        (pod("from-annotations", annotations={"example.com/gang": "BERT", "example.com/replicas": "2"}),
         None, None, f"annotation {GROUP}: \"BERT\" is not a PodGroup name: must be a lowercase RFC 1123 "
                     f"subdomain (a-z, 0-9, '-', '.')"),
    ],
    ids=["fixed", "from-annotations", "bad-count", "bad-name"],
)
def test_the_scheduler_reads_the_group_the_webhook_wrote(obj, group, min_member, problem):
    _, result = admitted(obj)
    facts = pods.parse(result)
    assert (facts.group, facts.group_min_member) == (group, min_member)
    assert ([p for p in facts.problems if "pod-group" in p] or [None]) == [problem]


def test_mutate_patch_shows_the_group_annotations(tmp_path):
    settings = tmp_path / "config.yaml"
    settings.write_text(yaml.safe_dump({"admission": RULES}))
    worker = tmp_path / "pod.yaml"
    worker.write_text(yaml.safe_dump(pod("fixed", labels={JOB_LABEL: "resnet"}, annotations={"keep": "me"})))
    result = gpu_scheduler("mutate", "--config", str(settings), "--patch", str(worker))
    patch = json.loads(result.stdout)
    assert {"op": "add", "path": "/metadata/annotations/gpu-scheduler.io~1pod-group", "value": "resnet"} in patch
    assert {"op": "add", "path": "/metadata/annotations/gpu-scheduler.io~1pod-group-min-member", "value": "8"} in patch
    worker.write_text(yaml.safe_dump(pod("fixed")))
    result = gpu_scheduler("mutate", "--config", str(settings), "--patch", str(worker))
    assert GROUP not in result.stdout
    assert result.stderr.splitlines()[-1] == (f"# set.podGroup: no group annotations: the pod has no label "
                                              f"{JOB_LABEL} (nameFrom)")
