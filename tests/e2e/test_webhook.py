"""The webhook against the real kube-apiserver: registration, selectors, reloads, failure modes, load."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import E2E_CONFIG
from tests.e2e.installing import wait_for

GPU = "nvidia.com/gpu"
RULE = "gpu-scheduler.io/rule"
COST = "controller.kubernetes.io/pod-deletion-cost"
MODEL = "gpu.nvidia.com/model"


def new_namespace(core: Any, labels: dict[str, str] | None = None) -> str:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    return name


def opted_in(core: Any, **labels: str) -> str:
    return new_namespace(core, {"gpu-scheduler.io/inject": "enabled", **labels})


def pod_body(*, gpus: int | None = 1, name: str | None = None, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, scheduler: str | None = None,
             init: bool = False, sidecar: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/cuda:12"}
    if gpus is not None:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    metadata: dict[str, Any] = {"name": name} if name else {"generateName": "gpu-"}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if init or sidecar:
        spec["initContainers"] = [{"name": "setup", "image": "registry.invalid/busybox:1",
                                   **({"restartPolicy": "Always"} if sidecar else {})}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def create(core: Any, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
    return core.create_namespaced_pod(namespace, body, **kwargs)


def mutated(pod: Any) -> bool:
    return pod.spec.scheduler_name == "gpu-scheduler" and RULE in (pod.metadata.annotations or {})


@pytest.fixture(scope="module")
def webhook(installed_webhook: Any) -> Any:
    core = installed_webhook.core
    namespace = opted_in(core)
    wait_for(lambda: mutated(create(core, namespace, pod_body(), dry_run="All")),
             "the apiserver to call the registered webhook")
    return installed_webhook


@pytest.fixture()
def core(webhook: Any) -> Any:
    return webhook.core


def test_a_gpu_pod_in_an_opted_in_namespace_is_mutated(core):
    namespace = opted_in(core)
    pod = create(core, namespace, pod_body(name="trainer"))
    assert pod.spec.scheduler_name == "gpu-scheduler"
    annotations = pod.metadata.annotations
    assert annotations[RULE] == "any-gpu"
    assert annotations[MODEL] == "A100|H100"
    assert annotations[COST] == "-50"
    stored = core.read_namespaced_pod("trainer", namespace)
    assert stored.spec.scheduler_name == "gpu-scheduler" and stored.metadata.annotations == annotations


@pytest.mark.parametrize(
    ("body", "namespace_kind"),
    [
        (pod_body(), "unlabelled"),
        (pod_body(gpus=None), "opted-in"),
        (pod_body(labels={"gpu-scheduler.io/inject": "disabled"}), "opted-in"),
        (pod_body(scheduler="volcano"), "opted-in"),
    ],
    ids=["unlabelled-namespace", "non-gpu-pod", "pod-opted-out", "other-scheduler"],
)
def test_pods_that_are_not_ours_come_back_unchanged(core, body, namespace_kind):
    namespace = opted_in(core) if namespace_kind == "opted-in" else new_namespace(core)
    pod = create(core, namespace, body)
    assert pod.spec.scheduler_name == (body["spec"].get("schedulerName") or "default-scheduler")
    assert pod.metadata.annotations == body["metadata"].get("annotations")
    assert RULE not in (pod.metadata.annotations or {})


@pytest.mark.parametrize(
    "body",
    [
        pod_body(),
        pod_body(name="named"),
        pod_body(annotations={"team.example.com/owner": "ml"}),
        pod_body(annotations={}),
        pod_body(annotations={MODEL: "H100", COST: "5"}),
        pod_body(labels={"app": "x"}),
        pod_body(init=True),
        pod_body(sidecar=True, gpus=2),
    ],
    ids=["generateName", "named", "existing-annotations", "empty-annotations", "own-values-kept",
         "labels", "init-container", "sidecar"],
)
def test_every_shape_of_gpu_pod_is_accepted_and_mutated(core, body):
    namespace = opted_in(core)
    pod = create(core, namespace, body)
    assert mutated(pod)
    annotations = pod.metadata.annotations
    for key, value in (body["metadata"].get("annotations") or {}).items():
        assert annotations[key] == value, "a value the pod had was overwritten"
    assert annotations[COST] == (body["metadata"].get("annotations") or {}).get(COST, "-50")


def test_a_gpu_request_only_in_an_init_container_counts(core):
    namespace = opted_in(core)
    body = pod_body(gpus=None, init=True)
    body["spec"]["initContainers"][0]["resources"] = {"limits": {GPU: "1"}}
    assert mutated(create(core, namespace, body))


def test_namespace_selector_rules_follow_real_namespace_labels(core):
    research = opted_in(core, team="research")
    pod = create(core, research, pod_body())
    assert pod.metadata.annotations[RULE] == "research-a100"
    assert pod.metadata.annotations[COST] == "-100"
    assert pod.metadata.annotations["gpu.nvidia.com/memory"] == "40960"

    core.patch_namespace(research, {"metadata": {"labels": {"team": "web"}}})
    wait_for(lambda: create(core, research, pod_body(), dry_run="All").metadata.annotations[RULE] == "any-gpu",
             "the relabelled namespace to stop matching", timeout=10)
    core.patch_namespace(research, {"metadata": {"labels": {"team": "research"}}})
    wait_for(lambda: create(core, research, pod_body(), dry_run="All").metadata.annotations[RULE]
             == "research-a100", "the namespace to match again", timeout=10)


def test_server_side_dry_run_returns_the_mutated_pod_and_stores_nothing(core):
    namespace = opted_in(core)
    pod = create(core, namespace, pod_body(name="dry"), dry_run="All")
    assert mutated(pod)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("dry", namespace)
    assert missing.value.status == 404
    assert core.list_namespaced_pod(namespace).items == []


def test_a_configmap_edit_applies_within_5_seconds_and_an_invalid_one_is_refused(webhook, core):
    namespace = opted_in(core)
    edited = E2E_CONFIG.replace("name: any-gpu", "name: edited").replace('"A100|H100"', "L4")
    try:
        webhook.set_config(edited)
        wait_for(lambda: create(core, namespace, pod_body(), dry_run="All").metadata.annotations[RULE] == "edited",
                 "the edited rule", timeout=5)
        # every worker has it: several fresh requests all see the edit
        for _ in range(10):
            assert create(core, namespace, pod_body(), dry_run="All").metadata.annotations[MODEL] == "L4"

        webhook.set_config(edited.replace("gpuMemoryMiB: 40960", 'gpuMemoryMiB: "40Gi"'))
        wait_for(lambda: "must be a positive integer, got \"40Gi\"" in webhook.server.logs(),
                 "the webhook to reject the invalid edit", timeout=5)
        for _ in range(10):
            assert create(core, namespace, pod_body(), dry_run="All").metadata.annotations[RULE] == "edited"
    finally:
        webhook.set_config(E2E_CONFIG)
        wait_for(lambda: create(core, namespace, pod_body(), dry_run="All").metadata.annotations[RULE] == "any-gpu",
                 "the original config to return", timeout=5)


def test_webhook_down_ignore_admits_unmutated_fail_refuses_restart_recovers(webhook, core):
    namespace = opted_in(core)
    webhook.server.stop()
    try:
        pod = wait_for(lambda: (p := create(core, namespace, pod_body(), dry_run="All")) and not mutated(p) and p,
                       "failurePolicy Ignore to admit the pod unmutated")
        assert pod.spec.scheduler_name == "default-scheduler"

        webhook.set_failure_policy("Fail")

        def refused() -> str:
            try:
                create(core, namespace, pod_body(), dry_run="All")
            except ApiException as err:
                return str(err.body)
            return ""

        message = wait_for(refused, "failurePolicy Fail to refuse the pod")
        assert 'failed calling webhook \\"pods.gpu-scheduler.io\\"' in message or \
            'failed calling webhook "pods.gpu-scheduler.io"' in message

        webhook.start_server()
        wait_for(lambda: mutated(create(core, namespace, pod_body(), dry_run="All")),
                 "the restarted webhook to serve again")
    finally:
        if webhook.server.process.poll() is not None:
            webhook.start_server()
        webhook.set_failure_policy("Ignore")


def test_a_burst_of_concurrent_creations_is_all_admitted_and_mutated(core):
    namespace = opted_in(core)
    bodies = [pod_body(name=f"burst-{n}", gpus=None if n % 5 == 4 else 1) for n in range(250)]

    def create_one(body: dict[str, Any]) -> Any:
        return create(core, namespace, body)

    with ThreadPoolExecutor(max_workers=50) as pool:
        created = list(pool.map(create_one, bodies))
    assert len(created) == 250
    stored = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    assert len(stored) == 250, "pods were lost"
    for body in bodies:
        pod = stored[body["metadata"]["name"]]
        is_gpu = "resources" in body["spec"]["containers"][0]
        assert mutated(pod) is is_gpu, pod.metadata.name
