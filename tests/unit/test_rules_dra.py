"""Rules on DRA demand: which pods ask for devices of which DeviceClasses, how many GPUs that is, how a rule with
deviceClasses matches, and what happens when a claim cannot be read (unknown, never a rejection).

The webhook reads claims and templates through webhook.resourceclaims (one GET each, kept a while); the simulator
hands the input's own (scheduler_core.simulation.Namespaces). Both are checked here with fakes; tests/e2e/
test_webhook_dra.py runs the real webhook against a real apiserver.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import jsonpatch
import kubernetes_validate
import orjson
import pytest
from prometheus_client import REGISTRY

from scheduler_core import simulation
from webhook import admission, config, patches, resourceclaims, rules

K8S_VERSION = "1.36.0"
GPU, MIG, NIC = "gpu.nvidia.com", "mig.nvidia.com", "nic.example.com"
IMPLICIT = "deviceclass.resource.kubernetes.io/"

SETTINGS = config.parse({
    "admission": {
        "deviceClasses": [GPU, MIG],
        "rules": [
            {"name": "dra-training", "deviceClasses": [GPU], "minGPUs": 2, "set": {"gpuModel": "H100"}},
            {"name": "small", "maxGPUs": 1, "set": {"spot": "prefer"}},
            {"name": "any-gpu"},
        ],
    },
})


def request(name: str = "gpus", cls: str = GPU, count: int | None = 1, *, mode: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    return {"name": name, "exactly": exactly}


def first_available(name: str, *subrequests: tuple[str, int]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [{"name": f"alt-{i}", "deviceClassName": cls, "count": count}
                                             for i, (cls, count) in enumerate(subrequests)]}


def template(name: str, *requests: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def claim(name: str, *requests: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}}}


OBJECTS = {
    ("ResourceClaimTemplate", "two-gpus"): template("two-gpus", request(count=2)),
    ("ResourceClaimTemplate", "one-gpu"): template("one-gpu", request()),
    ("ResourceClaimTemplate", "all-gpus"): template("all-gpus", request(mode="All", count=None)),
    ("ResourceClaimTemplate", "mig"): template("mig", request("slice", MIG, 1)),
    ("ResourceClaimTemplate", "nic"): template("nic", request("nic", NIC, 1)),
    ("ResourceClaimTemplate", "gpu-and-nic"): template("gpu-and-nic", request(count=4), request("nic", NIC, 2)),
    ("ResourceClaimTemplate", "prefer-four"): template("prefer-four", first_available("gpus", (GPU, 4), (GPU, 2))),
    ("ResourceClaimTemplate", "nic-or-gpu"): template("nic-or-gpu", first_available("any", (NIC, 1), (GPU, 3))),
    ("ResourceClaim", "shared"): claim("shared", request(count=2)),
}


class Lookup:
    """A ClaimLookup over OBJECTS (or the objects given) that records what was asked."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]] | None = None, *, failing: str | None = None):
        self.objects = OBJECTS if objects is None else objects
        self.failing = failing
        self.asked: list[tuple[str, str]] = []

    def __call__(self, kind: str, name: str) -> rules.DeviceRequests | str:
        self.asked.append((kind, name))
        if self.failing is not None:
            return self.failing
        found = self.objects.get((kind, name))
        return "not found" if found is None else rules.device_requests(kind, found)


def pod(*entries: dict[str, str], limits: dict[str, str] | None = None, init_limits: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main", "image": "registry.invalid/cuda:12"}
    if limits:
        main["resources"] = {"limits": limits}
    spec: dict[str, Any] = {"containers": [main]}
    if init_limits:
        spec["initContainers"] = [{"name": "setup", "image": "registry.invalid/busybox:1",
                                   "resources": {"limits": init_limits}}]
    if entries:
        spec["resourceClaims"] = [{"name": f"claim-{i}", **entry} for i, entry in enumerate(entries)]
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def tmpl(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


def named(name: str) -> dict[str, str]:
    return {"resourceClaimName": name}


def decide(obj: dict[str, Any], lookup: Any = None, settings: config.Config = SETTINGS) -> patches.Decision:
    return patches.decide(obj, namespace_labels={}, settings=settings, claims=Lookup() if lookup is None else lookup)


# --- reading claims and templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (template("t", request(count=2)), (rules.DeviceRequest("gpus", ((GPU, 2),)),)),
        (template("t", {"name": "gpus", "exactly": {"deviceClassName": GPU}}),
         (rules.DeviceRequest("gpus", ((GPU, 1),)),)),
        (template("t", request(mode="All", count=None)), (rules.DeviceRequest("gpus", ((GPU, None),)),)),
        (template("t", request(mode="ExactCount", count=3)), (rules.DeviceRequest("gpus", ((GPU, 3),)),)),
        (template("t", first_available("gpus", (GPU, 4), (MIG, 2))),
         (rules.DeviceRequest("gpus", ((GPU, 4), (MIG, 2))),)),
        (claim("c", request(count=2), request("nic", NIC, 1)),
         (rules.DeviceRequest("gpus", ((GPU, 2),)), rules.DeviceRequest("nic", ((NIC, 1),)))),
        ({"kind": "ResourceClaimTemplate", "spec": {"spec": {"devices": {"requests": "nope"}}}}, ()),
        ({"kind": "ResourceClaimTemplate", "spec": None}, ()),
        ({"kind": "ResourceClaim", "spec": {"devices": {"requests": [{"name": "x", "exactly": {"count": -3}}]}}},
         (rules.DeviceRequest("x", (("", 0),)),)),
    ],
    ids=["exact", "count-defaults-to-1", "all", "exact-count-mode", "first-available", "claim-two-requests",
         "requests-not-a-list", "no-spec", "hostile-count"],
)
def test_device_requests_are_read_as_the_allocator_reads_them(obj, expected):
    assert rules.device_requests(obj["kind"], obj) == expected


# --- the GPU count ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "gpus", "classes", "at_least"),
    [
        (pod(tmpl("two-gpus")), 2, {GPU}, False),
        (pod(tmpl("two-gpus"), tmpl("two-gpus")), 4, {GPU}, False),  # each entry makes a claim of its own
        (pod(named("shared"), named("shared")), 2, {GPU}, False),  # one shared claim, allocated once
        (pod(tmpl("two-gpus"), named("shared")), 4, {GPU}, False),
        (pod(tmpl("mig"), tmpl("one-gpu")), 2, {GPU, MIG}, False),
        (pod(tmpl("gpu-and-nic")), 4, {GPU, NIC}, False),  # the NIC's devices are no GPUs
        (pod(tmpl("nic")), 0, {NIC}, False),
        (pod(tmpl("prefer-four")), 4, {GPU}, False),  # firstAvailable: its first subrequest's count
        (pod(tmpl("nic-or-gpu")), 3, {GPU, NIC}, False),  # ... of a GPU class
        (pod(tmpl("all-gpus")), 1, {GPU}, True),
        (pod(limits={f"{IMPLICIT}{GPU}": "3"}), 3, {GPU}, False),
        (pod(limits={f"{IMPLICIT}{GPU}": "2"}, init_limits={f"{IMPLICIT}{GPU}": "4"}), 4, {GPU}, False),
        (pod(tmpl("one-gpu"), limits={f"{IMPLICIT}{MIG}": "2"}), 3, {GPU, MIG}, False),
        (pod(limits={f"{IMPLICIT}{NIC}": "1"}), 0, {NIC}, False),
        (pod(named("absent")), 0, set(), True),
        (pod(named("absent"), tmpl("two-gpus")), 2, {GPU}, True),
    ],
    ids=["template", "template-twice", "shared-claim-twice", "template-and-claim", "mig-and-gpu", "gpu-and-nic",
         "nic-only", "first-available", "first-available-gpu-second", "all", "implicit", "implicit-init-peak",
         "claim-and-implicit", "implicit-nic", "unknown", "unknown-and-known"],
)
def test_the_gpu_count_is_the_devices_of_the_gpu_classes(obj, gpus, classes, at_least):
    demand = rules.dra_demand(obj, gpu_classes=(GPU, MIG), lookup=Lookup())
    assert (demand.gpus, set(demand.classes), demand.at_least) == (gpus, classes, at_least)
    assert demand.gpu is (gpus > 0 or at_least)


def test_an_implicit_resource_also_in_gpu_resources_is_counted_once():
    settings = config.parse({"admission": {"gpuResources": ["nvidia.com/gpu", f"{IMPLICIT}{GPU}"],
                                           "deviceClasses": [GPU], "rules": [{"name": "all"}]}})
    decision = decide(pod(limits={f"{IMPLICIT}{GPU}": "2", "nvidia.com/gpu": "1"}), settings=settings)
    assert decision.gpus == 3 and decision.rule == "all"


def test_device_plugin_gpus_shares_and_dra_devices_add_up():
    obj = pod(tmpl("two-gpus"), limits={"nvidia.com/gpu": "1"})
    assert decide(obj).gpus == 3
    share = pod(tmpl("one-gpu"))
    share["metadata"]["annotations"] = {"gpu-scheduler.io/gpu-milli": "500"}
    assert decide(share).gpus == Fraction(3, 2)


def test_unknown_claims_make_a_possible_gpu_pod_only_where_gpu_classes_are_configured():
    assert rules.dra_demand(pod(named("absent")), gpu_classes=(GPU,), lookup=Lookup()).gpu
    unknown = rules.dra_demand(pod(named("absent")), gpu_classes=(), lookup=Lookup())
    assert not unknown.gpu and not unknown.at_least and unknown.unknown == ("ResourceClaim absent: not found",)


# --- matching -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "rule"),
    [
        (pod(tmpl("two-gpus")), "dra-training"),
        (pod(named("shared")), "dra-training"),
        (pod(tmpl("prefer-four")), "dra-training"),
        (pod(tmpl("gpu-and-nic")), "dra-training"),
        (pod(limits={f"{IMPLICIT}{GPU}": "2"}), "dra-training"),
        (pod(tmpl("one-gpu")), "small"),  # below minGPUs
        (pod(tmpl("mig")), "small"),  # another GPU class
        (pod(tmpl("mig"), tmpl("mig")), "any-gpu"),
        (pod(limits={"nvidia.com/gpu": "4"}), "any-gpu"),  # a device-plugin pod asks nothing of DRA
        (pod(tmpl("all-gpus")), "any-gpu"),  # at least 1: neither minGPUs 2 nor maxGPUs 1 can be shown
        (pod(named("absent"), tmpl("two-gpus")), "dra-training"),  # the known classes and count suffice
        (pod(named("absent")), "any-gpu"),
    ],
    ids=["template", "shared-claim", "first-available", "gpu-and-nic", "implicit", "one-gpu", "mig", "two-migs",
         "device-plugin", "all", "partly-unknown", "unknown"],
)
def test_rule_selection_by_dra_demand(obj, rule):
    assert decide(obj).rule == rule


def test_a_matched_dra_pod_gets_the_rule_patch_that_applies_and_validates():
    obj = pod(tmpl("two-gpus"))
    decision = decide(obj)
    assert decision.explanation() == ("matched rule 'dra-training'",)
    result = jsonpatch.apply_patch(copy.deepcopy(obj), decision.patch)
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    assert result["spec"]["schedulerName"] == "gpu-scheduler"
    assert result["metadata"]["annotations"] == {
        "gpu.nvidia.com/model": "H100", "controller.kubernetes.io/pod-deletion-cost": "-50",
        "gpu-scheduler.io/initial-deletion-cost": "-50", "gpu-scheduler.io/rule": "dra-training"}
    again = decide(result)
    assert again.patch == [] and again.rule == "dra-training"


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (pod(limits={"nvidia.com/gpu": "2"}), "deviceClasses gpu.nvidia.com: the pod asks for no devices through DRA"),
        (pod(tmpl("mig"), tmpl("nic"), tmpl("mig")),
         "deviceClasses gpu.nvidia.com: the pod asks for devices of mig.nvidia.com, nic.example.com only"),
        (pod(named("absent")),
         "deviceClasses gpu.nvidia.com: the pod's DRA demand is unknown (ResourceClaim absent: not found)"),
        (pod(named("absent"), tmpl("gone"), tmpl("mig")),
         "deviceClasses gpu.nvidia.com: the pod asks for devices of mig.nvidia.com, and the rest of its DRA demand "
         "is unknown (ResourceClaim absent: not found; ResourceClaimTemplate gone: not found)"),
        (pod(tmpl("one-gpu")), "minGPUs 2: the pod asks for 1 GPU"),
        (pod(tmpl("all-gpus")), "minGPUs 2: the pod asks for at least 1 GPU"),
    ],
    ids=["device-plugin", "other-classes", "unknown", "other-and-unknown", "min-gpus", "all"],
)
def test_a_rule_with_device_classes_skipped_says_why(obj, why):
    assert decide(obj).skipped[0] == ("dra-training", why)


def test_an_all_request_is_counted_as_at_least_one_and_the_explanation_says_so():
    decision = decide(pod(tmpl("all-gpus")))
    assert decision.gpus == 1
    assert decision.explanation() == (
        "GPU count: ResourceClaimTemplate all-gpus request gpus asks for all devices of gpu.nvidia.com "
        "(allocationMode All): counted as at least 1",
        "rule 'dra-training' skipped: minGPUs 2: the pod asks for at least 1 GPU",
        "rule 'small' skipped: maxGPUs 1: the pod asks for at least 1 GPU, and how many more is unknown",
        "matched rule 'any-gpu'",
    )


def test_a_pod_whose_claims_cannot_be_read_is_admitted_and_says_why():
    lookup = Lookup(failing="cannot be read: HTTP 503 Service Unavailable")
    decision = decide(pod(tmpl("two-gpus")), lookup)
    assert decision.rule == "any-gpu" and decision.patch  # never rejected: only the DRA rules cannot match
    assert decision.claims_unknown == ("ResourceClaimTemplate two-gpus: cannot be read: HTTP 503 Service Unavailable",)
    assert decision.explanation() == (
        "DRA demand unknown: ResourceClaimTemplate two-gpus: cannot be read: HTTP 503 Service Unavailable",
        "taken as a GPU pod: its unknown DRA demand may ask for devices of gpu.nvidia.com, mig.nvidia.com",
        "rule 'dra-training' skipped: deviceClasses gpu.nvidia.com: the pod's DRA demand is unknown "
        "(ResourceClaimTemplate two-gpus: cannot be read: HTTP 503 Service Unavailable)",
        "rule 'small' skipped: maxGPUs 1: the pod asks for at least 0 GPUs, and how many more is unknown",
        "matched rule 'any-gpu'",
    )


def test_without_a_claim_lookup_the_demand_in_claims_is_unknown():
    decision = patches.decide(pod(tmpl("two-gpus")), namespace_labels={}, settings=SETTINGS)
    assert decision.claims_unknown == ("ResourceClaimTemplate two-gpus: not known here (no access to the cluster)",)
    implicit = patches.decide(pod(limits={f"{IMPLICIT}{GPU}": "2"}), namespace_labels={}, settings=SETTINGS)
    assert implicit.rule == "dra-training" and implicit.claims_unknown == ()  # needs no lookup


@pytest.mark.parametrize(
    ("obj", "settings", "reason"),
    [
        (pod(tmpl("nic")), SETTINGS, "not a GPU pod"),
        (pod(limits={f"{IMPLICIT}{NIC}": "1"}), SETTINGS, "not a GPU pod"),
        (pod(tmpl("two-gpus")), config.parse({"admission": {"rules": [{"name": "r", "deviceClasses": [GPU]}]}}),
         "not a GPU pod"),  # no admission.deviceClasses: claims do not make GPU pods
        (pod(tmpl("two-gpus")), config.Config(), "not a GPU pod"),
    ],
    ids=["nic-claim", "nic-implicit", "rule-classes-only", "no-dra-config"],
)
def test_pods_asking_no_gpu_class_are_not_gpu_pods(obj, settings, reason):
    decision = decide(obj, settings=settings)
    assert (decision.reason, decision.patch) == (reason, [])


def test_claims_are_read_only_for_pods_that_have_them_and_configs_that_need_them():
    lookup = Lookup()
    decide(pod(limits={"nvidia.com/gpu": "1"}), lookup)  # no claims
    decide(pod(tmpl("two-gpus")), lookup, config.parse({"admission": {"rules": [{"name": "r"}]}}))  # no DRA fields
    rule_only = config.parse({"admission": {"rules": [{"name": "r", "deviceClasses": [GPU]}]}})
    decide(pod(tmpl("two-gpus")), lookup, rule_only)
    assert lookup.asked == []  # the last: not a GPU pod without admission.deviceClasses, so nothing to decide
    decide(pod(tmpl("two-gpus"), limits={"nvidia.com/gpu": "1"}), lookup, rule_only)
    assert lookup.asked == [("ResourceClaimTemplate", "two-gpus")]


def test_a_device_plugin_pod_matches_a_rule_by_its_dra_classes_without_gpu_classes():
    settings = config.parse({"admission": {"rules": [{"name": "with-nic", "deviceClasses": [NIC]}, {"name": "rest"}]}})
    assert decide(pod(tmpl("nic"), limits={"nvidia.com/gpu": "1"}), settings=settings).rule == "with-nic"
    decision = decide(pod(limits={"nvidia.com/gpu": "1"}), settings=settings)
    assert decision.skipped == (("with-nic", "deviceClasses nic.example.com: the pod asks for no devices through DRA"),)


# --- the webhook's reader: one GET per claim, kept a while, never raising -----------------------------------------


class FakeAPI:
    """`fetch` for ClaimCache: answers by path, or raises what it is told."""

    def __init__(self, objects: dict[str, dict[str, Any]]):
        self.objects = objects
        self.error: Exception | None = None
        self.paths: list[str] = []

    def __call__(self, path: str, timeout: float) -> bytes:
        assert timeout == 1.0
        self.paths.append(path)
        if self.error is not None:
            raise self.error
        if path not in self.objects:
            raise HTTPError(404, "Not Found")
        return orjson.dumps(self.objects[path])


class HTTPError(Exception):
    """As the Kubernetes client's ApiException: an HTTP answer, with its status and reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"({status}) {reason}")
        self.status, self.reason = status, reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


TEMPLATE_PATH = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates/two-gpus"
CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/shared"


def cache(**kwargs: Any) -> tuple[resourceclaims.ClaimCache, FakeAPI, Clock]:
    api = FakeAPI({TEMPLATE_PATH: OBJECTS[("ResourceClaimTemplate", "two-gpus")],
                   CLAIM_PATH: OBJECTS[("ResourceClaim", "shared")]})
    clock = Clock()
    return resourceclaims.ClaimCache(api, clock=clock, **kwargs), api, clock


def failures(reason: str) -> float:
    return REGISTRY.get_sample_value("gpu_scheduler_webhook_claim_lookup_failures_total", {"reason": reason}) or 0.0


def test_api_paths_name_the_namespace_and_the_object_quoted():
    assert resourceclaims.api_path("ResourceClaimTemplate", "ns", "two-gpus") == TEMPLATE_PATH
    assert resourceclaims.api_path("ResourceClaim", "ns", "a/b") == \
        "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a%2Fb"


def test_each_claim_is_read_once_and_kept_for_the_ttl():
    reader, api, clock = cache(ttl=30)
    expected = (rules.DeviceRequest("gpus", ((GPU, 2),)),)
    assert reader.get("ResourceClaimTemplate", "ns", "two-gpus") == expected
    clock.now += 29
    assert reader.get("ResourceClaimTemplate", "ns", "two-gpus") == expected
    assert api.paths == [TEMPLATE_PATH]
    clock.now += 2
    assert reader.get("ResourceClaimTemplate", "ns", "two-gpus") == expected
    assert api.paths == [TEMPLATE_PATH, TEMPLATE_PATH]


def test_a_claim_not_found_is_unknown_and_asked_again_next_time():
    reader, api, _ = cache()
    before = failures("not_found")
    assert reader.get("ResourceClaim", "ns", "later") == "not found"
    assert reader.get("ResourceClaim", "ns", "later") == "not found"
    assert len(api.paths) == 2 and failures("not_found") == before + 2


def test_an_http_error_is_unknown_with_its_status_and_does_not_stop_later_reads():
    reader, api, _ = cache()
    api.error = HTTPError(403, "Forbidden")
    before = failures("error")
    assert reader.get("ResourceClaim", "ns", "shared") == "cannot be read: HTTP 403 Forbidden"
    api.error = None
    assert reader.get("ResourceClaim", "ns", "shared") == (rules.DeviceRequest("gpus", ((GPU, 2),)),)
    assert failures("error") == before + 1


def test_an_unreachable_api_costs_one_timeout_then_none_for_the_backoff():
    reader, api, clock = cache(backoff=5)
    api.error = TimeoutError("timed out")
    why = "cannot be read: TimeoutError: timed out"
    assert reader.get("ResourceClaim", "ns", "shared") == why
    assert reader.get("ResourceClaimTemplate", "ns", "two-gpus") == f"{why} (no new try for 5 s)"
    assert len(api.paths) == 1
    api.error = None
    clock.now += 5.5
    assert reader.get("ResourceClaimTemplate", "ns", "two-gpus") == (rules.DeviceRequest("gpus", ((GPU, 2),)),)


def test_what_was_read_before_the_api_went_away_is_still_served():
    reader, api, clock = cache()
    reader.get("ResourceClaim", "ns", "shared")
    api.error = ConnectionRefusedError("refused")
    clock.now += 10
    assert reader.get("ResourceClaim", "ns", "shared") == (rules.DeviceRequest("gpus", ((GPU, 2),)),)


def test_an_answer_that_is_not_json_is_unknown_and_does_not_trip_the_backoff():
    reader, api, _ = cache()
    api.objects[CLAIM_PATH] = None  # served as "null": no object
    assert reader.get("ResourceClaim", "ns", "shared") == ()  # null reads as an object without requests
    reader2 = resourceclaims.ClaimCache(lambda path, timeout: b"<html>", clock=Clock())
    assert reader2.get("ResourceClaim", "ns", "x") == "cannot be read: JSONDecodeError"
    assert reader2.get("ResourceClaim", "ns", "x") == "cannot be read: JSONDecodeError"


def test_the_cache_keeps_the_most_recently_used_entries():
    api = FakeAPI({f"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c{i}": claim(f"c{i}", request())
                   for i in range(4)})
    reader = resourceclaims.ClaimCache(api, max_entries=2, clock=Clock())
    for name in ("c0", "c1", "c0", "c2", "c0", "c1"):
        reader.get("ResourceClaim", "ns", name)
    assert [path.rsplit("/", 1)[1] for path in api.paths] == ["c0", "c1", "c2", "c1"]


# --- simulate: the input's claims and templates are all there are ------------------------------------------------


def test_simulate_reads_the_inputs_claims_and_templates_for_the_rules():
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "ns", "labels": {"gpu-scheduler.io/inject": "enabled"}}}
    pods = []
    for name, entry in (("trainer", tmpl("two-gpus")), ("shared", named("shared")), ("migs", tmpl("mig")),
                        ("absent", tmpl("absent")), ("nic", tmpl("nic"))):
        obj = pod(entry)
        obj["metadata"]["name"] = name
        pods.append(obj)
    storage = [OBJECTS[("ResourceClaimTemplate", n)] for n in ("two-gpus", "mig", "nic")]
    storage += [OBJECTS[("ResourceClaim", "shared")], template("absent", request(count=8), namespace="elsewhere")]
    result = simulation.simulate([], [namespace, *pods], scheduler_name="gpu-scheduler",
                                 gpu_resources=SETTINGS.admission.gpu_resources, scheduling=SETTINGS.scheduling,
                                 admit=lambda p, n: admission.admit(p, n, settings=SETTINGS), storage_objects=storage)
    placed = {p.pod: p for p in result.placements}
    assert {name: placed[f"ns/{name}"].rule for name in ("trainer", "shared", "migs", "absent", "nic")} == {
        "trainer": "dra-training", "shared": "dra-training", "migs": "small", "absent": "any-gpu", "nic": None}
    assert placed["ns/absent"].admission[0] == "DRA demand unknown: ResourceClaimTemplate absent: not in the input"
    assert placed["ns/nic"].admission == ("not a GPU pod",)


def test_admit_without_the_simulators_namespaces_knows_no_claims():
    namespaces = {"ns": {"gpu-scheduler.io/inject": "enabled"}}
    admitted, rule, lines = admission.admit(pod(tmpl("two-gpus")), namespaces, settings=SETTINGS)
    assert rule == "any-gpu" and lines[0] == "DRA demand unknown: ResourceClaimTemplate two-gpus: not in the input"
    labelled = simulation.Namespaces(namespaces, claims={
        ("ResourceClaimTemplate", "ns", "two-gpus"): OBJECTS[("ResourceClaimTemplate", "two-gpus")]})
    assert admission.admit(pod(tmpl("two-gpus")), labelled, settings=SETTINGS)[1] == "dra-training"
