"""AdmissionReview envelopes: what the apiserver accepts back, and what we refuse to read."""

import base64
import json

import pytest

from webhook import reviews

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x-"}, "spec": {"containers": []}}


def review(**request):
    base = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "admin"},
        "namespace": "default",
        "object": POD,
        "oldObject": None,
    }
    base.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}


def test_a_pod_create_is_read():
    parsed = reviews.parse(review(dryRun=True))
    assert parsed.is_pod_create and parsed.dry_run
    assert parsed.namespace == "default" and parsed.object == POD


@pytest.mark.parametrize(
    "request_fields",
    [
        {"operation": "UPDATE", "oldObject": POD},
        {"operation": "DELETE", "object": None, "oldObject": POD},
        {"subResource": "status"},
        {"resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "object": {"kind": "Deployment"}},
        {"resource": {"group": "", "version": "v1", "resource": "configmaps"}, "object": {"kind": "ConfigMap"}},
    ],
)
def test_other_requests_are_not_pod_creates(request_fields):
    assert not reviews.parse(review(**request_fields)).is_pod_create


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "body: expected an AdmissionReview object, got a list"),
        ({"kind": "AdmissionReview", "request": {}}, "apiVersion: expected 'admission.k8s.io/v1', got null"),
        ({**review(), "apiVersion": "admission.k8s.io/v1beta1"},
         "apiVersion: expected 'admission.k8s.io/v1', got \"admission.k8s.io/v1beta1\""),
        ({**review(), "kind": "Pod"}, "kind: expected 'AdmissionReview', got \"Pod\""),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request: expected an object, got null"),
        (review(uid=""), 'request.uid: expected a non-empty string, got ""'),
        (review(uid=7), "request.uid: expected a non-empty string, got 7"),
        (review(operation="PATCH"),
         'request.operation: expected one of CREATE, UPDATE, DELETE, CONNECT, got "PATCH"'),
        (review(resource="pods"), 'request.resource: expected {group, version, resource}, got "pods"'),
        (review(object=None), "request.object: expected a Pod object, got null"),
        (review(object=[1]), "request.object: expected a Pod object, got a list"),
        (review(object={"kind": "Service"}), "request.object.kind: expected 'Pod', got \"Service\""),
        (review(object={"kind": "Pod", "spec": "x"}), "request.object.spec: expected an object, got a string"),
    ],
)
def test_malformed_reviews_say_what_is_wrong(body, message):
    with pytest.raises(reviews.ReviewError) as caught:
        reviews.parse(body)
    assert str(caught.value) == message


def test_a_response_with_a_patch_carries_its_type():
    patch = [{"op": "add", "path": "/spec/schedulerName", "value": "gpu-scheduler"}]
    answer = reviews.response("u1", patch=patch, audit={"rule": "r"}, warnings=["w"])
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == patch
    assert response["auditAnnotations"] == {"rule": "r"}
    assert response["warnings"] == ["w"]


def test_a_response_without_a_patch_has_neither_patch_nor_type():
    response = reviews.response("u1", patch=[])["response"]
    assert response == {"uid": "u1", "allowed": True}


def test_a_patch_value_orjson_refuses_is_still_encoded():
    """A lone surrogate (a config's set.annotations may hold one) is escaped, not a 500."""
    answer = reviews.response("u", patch=[{"op": "add", "path": "/metadata/annotations/x", "value": "\ud800"}])
    assert json.loads(base64.b64decode(answer["response"]["patch"]))[0]["value"] == "\ud800"
