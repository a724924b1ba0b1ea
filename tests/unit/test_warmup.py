"""Which pods the deletion-cost warm-up promotes."""

import datetime

import jsonpatch
import pytest

from scheduler_core import profile, warmup

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
WARMUP = profile.Warmup(seconds=60, cost=0)


def pod(cost="-50", initial="-50", ready_seconds_ago=120, ready=True, deleting=False):
    annotations = {}
    if cost is not None:
        annotations["controller.kubernetes.io/pod-deletion-cost"] = cost
    if initial is not None:
        annotations["gpu-scheduler.io/initial-deletion-cost"] = initial
    metadata = {"name": "p", "namespace": "ns", "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    since = (NOW - datetime.timedelta(seconds=ready_seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since}]
    return {"metadata": metadata, "status": {"conditions": conditions}}


def test_a_pod_ready_long_enough_is_promoted_with_a_guarded_patch():
    obj = pod()
    patch = warmup.due(warmup.Candidate.of(obj), now=NOW, warmup=WARMUP)
    assert patch == [
        {"op": "test", "path": "/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost", "value": "-50"},
        {"op": "replace", "path": "/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost", "value": "0"},
        {"op": "add", "path": "/metadata/annotations/gpu-scheduler.io~1deletion-cost-warmed-at",
         "value": "2026-11-29T12:00:00Z"},
    ]
    promoted = jsonpatch.apply_patch(obj, patch)
    assert warmup.due(warmup.Candidate.of(promoted), now=NOW, warmup=WARMUP) is None  # once
    promoted["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] = "-50"
    assert warmup.due(warmup.Candidate.of(promoted), now=NOW, warmup=WARMUP) is None  # even if set back later


@pytest.mark.parametrize(
    "obj",
    [
        pod(ready_seconds_ago=30),  # not warm yet
        pod(ready=False),
        pod(cost="7"),  # a user changed it: theirs wins
        pod(initial=None),  # the webhook did not write it
        pod(cost=None),
        pod(cost="0", initial="0"),  # already at the warmed value
        pod(deleting=True),
        pod(cost="9" * 300, initial="9" * 300),  # no int32: not a cost the webhook wrote
    ],
    ids=["too-early", "not-ready", "user-changed", "not-ours", "no-cost", "already-warm", "deleting", "not-a-cost"],
)
def test_pods_left_alone(obj):
    assert warmup.due(warmup.Candidate.of(obj), now=NOW, warmup=WARMUP) is None


def test_a_concurrent_user_change_makes_the_patch_fail_instead_of_overwriting():
    patch = warmup.due(warmup.Candidate.of(pod()), now=NOW, warmup=WARMUP)
    changed = pod(cost="9")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(changed, patch)
