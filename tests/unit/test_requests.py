"""Quantities and a pod's effective request, with kube-scheduler's arithmetic."""

from fractions import Fraction

import pytest

from scheduler_core import quantity, requests


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("2Gi", Fraction(2 * 2**30)),
        ("40960Mi", Fraction(40960 * 2**20)),
        ("1k", Fraction(1000)),
        ("1e3", Fraction(1000)),
        ("1E-3", Fraction(1, 1000)),
        ("100n", Fraction(1, 10**7)),
        (".5", Fraction(1, 2)),
        (2, Fraction(2)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_quantities(text, value):
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1Gb", "Gi", True, None, [1]])
def test_bad_quantities(text):
    with pytest.raises(quantity.QuantityError):
        quantity.parse(text)


def container(name, requests_=None, limits=None, restart_policy=None):
    c = {"name": name, "resources": {}}
    if requests_:
        c["resources"]["requests"] = requests_
    if limits:
        c["resources"]["limits"] = limits
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": []}, {}),
        (
            {"containers": [container("a", {"cpu": "1"}), container("b", {"cpu": "500m", "memory": "1Gi"})]},
            {"cpu": Fraction(3, 2), "memory": Fraction(2**30)},
        ),
        # limits stand in for requests the container does not state
        ({"containers": [container("a", limits={"nvidia.com/gpu": "2"})]}, {"nvidia.com/gpu": Fraction(2)}),
        # a request wins over its limit
        ({"containers": [container("a", {"cpu": "1"}, {"cpu": "4"})]}, {"cpu": Fraction(1)}),
        # an init container bigger than all containers sets the request
        (
            {"initContainers": [container("i", {"cpu": "4"})], "containers": [container("a", {"cpu": "1"})]},
            {"cpu": Fraction(4)},
        ),
        # a sidecar runs with the containers and adds to them
        (
            {
                "initContainers": [container("s", {"cpu": "1"}, restart_policy="Always")],
                "containers": [container("a", {"cpu": "1"})],
            },
            {"cpu": Fraction(2)},
        ),
        # an init container after a sidecar runs beside it
        (
            {
                "initContainers": [
                    container("s", {"cpu": "1"}, restart_policy="Always"),
                    container("i", {"cpu": "3"}),
                ],
                "containers": [container("a", {"cpu": "1"})],
            },
            {"cpu": Fraction(4)},
        ),
        # ... but not beside a sidecar started after it
        (
            {
                "initContainers": [
                    container("i", {"cpu": "3"}),
                    container("s", {"cpu": "1"}, restart_policy="Always"),
                ],
                "containers": [container("a", {"cpu": "1"})],
            },
            {"cpu": Fraction(3)},
        ),
        # overhead is added on top
        (
            {"containers": [container("a", {"cpu": "1"})], "overhead": {"cpu": "250m"}},
            {"cpu": Fraction(5, 4)},
        ),
    ],
)
def test_pod_requests(spec, expected):
    assert requests.pod_requests(spec) == expected


def test_only_the_named_resources_are_parsed():
    spec = {"containers": [container("a", {"cpu": "not-a-quantity", "nvidia.com/gpu": "2"})],
            "overhead": {"cpu": "1"}}
    assert requests.pod_requests(spec, only={"nvidia.com/gpu"}) == {"nvidia.com/gpu": Fraction(2)}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # pod-level requests replace the containers' sum for the resources they name, and only for those
        ({"containers": [container("a", {"cpu": "1", "memory": "1Gi"})], "resources": {"requests": {"cpu": "3"}}},
         {"cpu": Fraction(3), "memory": Fraction(2**30)}),
        # ... the init containers' peak and the sidecars too; overhead still comes on top
        ({"initContainers": [container("i", {"cpu": "8"}), container("s", {"cpu": "1"}, restart_policy="Always")],
          "containers": [container("a", {"cpu": "1"})], "resources": {"requests": {"cpu": "2"}},
          "overhead": {"cpu": "250m"}},
         {"cpu": Fraction(9, 4)}),
        # hugepages may be named at pod level; other resources there are ignored (the apiserver refuses them)
        ({"containers": [container("a", {"nvidia.com/gpu": "1"})],
          "resources": {"requests": {"hugepages-2Mi": "4Mi", "nvidia.com/gpu": "4", "ephemeral-storage": "1"}}},
         {"nvidia.com/gpu": Fraction(1), "hugepages-2Mi": Fraction(4 * 2**20)}),
        # defaulting: a pod-level limit stands in for a missing pod-level request ...
        ({"containers": [container("a")], "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
         {"cpu": Fraction(2), "memory": Fraction(2**30)}),
        # ... but cpu and memory that containers request default to their sum, not to the limit
        ({"containers": [container("a", {"cpu": "500m"})], "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}},
         {"cpu": Fraction(1, 2), "memory": Fraction(2**30)}),
        ({"containers": [container("a", {"hugepages-2Mi": "2Mi"})], "resources": {"limits": {"hugepages-2Mi": "4Mi"}}},
         {"hugepages-2Mi": Fraction(4 * 2**20)}),
        # a request of 0 at pod level is a request (of nothing)
        ({"containers": [container("a", {"cpu": "1"})], "resources": {"requests": {"cpu": "0"}}}, {"cpu": Fraction(0)}),
    ],
    ids=["replaces", "init-sidecar-overhead", "hugepages-only", "limit-defaults", "sum-defaults", "hugepages-limit",
         "zero"],
)
def test_pod_level_resources(spec, expected):
    assert requests.pod_requests(spec) == expected


@pytest.mark.parametrize(
    ("resource", "counted"),
    [("cpu", True), ("memory", True), ("ephemeral-storage", True), ("nvidia.com/gpu", True), ("example.com/a_b.c", True),
     ("hugepages-1Gi", True), ("kubernetes.io/batch-cpu", True), ("attachable-volumes-csi-x", True),
     ("pods", False), ("storage", False), ("Example.com/gpu", False), ("requests.example.com/gpu", False),
     ("example.com/a/b", False), ("example.com/" + "x" * 64, False), ("example.com/-x", False)],
)
def test_only_the_resources_kube_scheduler_counts_are_counted(resource, counted):
    assert requests.counted(resource) is counted
