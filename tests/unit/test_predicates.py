"""Taints, tolerations, node selector terms and GPU model tokens, as Kubernetes defines them."""

import pytest

from scheduler_core import predicates

T = predicates.Taint
Tol = predicates.Toleration


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Tol("dedicated", "Equal", "infra", "NoSchedule"), T("dedicated", "infra", "NoSchedule"), True),
        (Tol("dedicated", "Equal", "infra", ""), T("dedicated", "infra", "NoExecute"), True),  # empty effect: all
        (Tol("dedicated", "Equal", "other", "NoSchedule"), T("dedicated", "infra", "NoSchedule"), False),
        (Tol("dedicated", "Exists", "", "NoSchedule"), T("dedicated", "infra", "NoSchedule"), True),
        (Tol("dedicated", "Exists", "", "NoExecute"), T("dedicated", "infra", "NoSchedule"), False),
        (Tol("", "Exists", "", ""), T("anything", "x", "NoSchedule"), True),  # tolerate everything
        (Tol("other", "Exists", "", ""), T("dedicated", "x", "NoSchedule"), False),
        (Tol("gpu", "Equal", "", "NoSchedule"), T("gpu", "", "NoSchedule"), True),
    ],
)
def test_toleration_matching(toleration, taint, tolerated):
    assert toleration.tolerates(taint) is tolerated


def test_first_untolerated_ignores_prefer_no_schedule():
    taints = [T("soft", "", "PreferNoSchedule"), T("hard", "x", "NoSchedule")]
    assert predicates.first_untolerated(taints, []) == T("hard", "x", "NoSchedule")
    assert predicates.first_untolerated(taints, [Tol("hard", "Exists")]) is None
    assert predicates.count_untolerated(taints, [], "PreferNoSchedule") == 1


def terms(*raw):
    return predicates.parse_terms(list(raw))


@pytest.mark.parametrize(
    ("raw_terms", "labels", "name", "matches"),
    [
        ([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}], {"zone": "b"}, "n", True),
        ([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}], {}, "n", True),
        ([{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}], {"gpus": "8"}, "n", True),
        ([{"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["4"]}]}], {"gpus": "8"}, "n", False),
        ([{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}], {"gpus": "x"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]}],
         {"a": "1"}, "n", False),  # expressions are ANDed
        ([{"matchExpressions": [{"key": "a", "operator": "Exists"}]},
          {"matchExpressions": [{"key": "b", "operator": "Exists"}]}], {"b": "1"}, "n", True),  # terms are ORed
        ([{}], {"a": "1"}, "n", False),  # an empty term matches nothing
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}], {}, "node-1", True),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}], {}, "node-2", False),
    ],
)
def test_node_selector_terms(raw_terms, labels, name, matches):
    assert any(term.matches(labels, name) for term in terms(*raw_terms)) is matches


@pytest.mark.parametrize(
    ("wanted", "node_model", "matches"),
    [
        ("A100", "NVIDIA-A100-SXM4-40GB", True),
        ("a100", "NVIDIA-A100-SXM4-40GB", True),
        ("A100-80GB", "NVIDIA-A100-SXM4-40GB", False),
        ("A100-80GB", "NVIDIA-A100-SXM4-80GB", True),
        ("H100", "NVIDIA-A100-SXM4-40GB", False),
        ("A100|H100", "NVIDIA-H100-80GB-HBM3", True),
        ("A10", "NVIDIA-A100-SXM4-40GB", False),  # tokens, not substrings
        ("L4", None, False),
    ],
)
def test_model_tokens(wanted, node_model, matches):
    alternatives = tuple(predicates.model_tokens(part) for part in wanted.split("|"))
    assert predicates.model_matches(alternatives, node_model) is matches
