"""LabelSelector semantics as metav1.LabelSelectorAsSelector defines them."""

import pytest

from webhook import config, selectors


def selector(document: dict) -> selectors.LabelSelector:
    rules = config.parse({"admission": {"rules": [{"name": "r", "podSelector": document}]}}).admission.rules
    assert rules[0].pod_selector is not None
    return rules[0].pod_selector


@pytest.mark.parametrize(
    ("document", "labels", "matches"),
    [
        ({}, {}, True),
        ({}, {"a": "b"}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "ml", "x": "y"}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "web"}, False),
        ({"matchLabels": {"team": "ml"}}, {}, False),
        ({"matchLabels": {"team": "ml", "env": "prod"}}, {"team": "ml"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]}, {"t": "b"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {"t": "b"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {"t": "a"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": "x"}, False),
        (
            {"matchLabels": {"team": "ml"}, "matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"team": "ml"},
            False,
        ),
    ],
)
def test_matching(document, labels, matches):
    assert selector(document).matches(labels) is matches


def test_describe_reads_like_kubectl():
    found = selector(
        {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [
                {"key": "env", "operator": "NotIn", "values": ["dev", "ci"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert found.describe() == "team=ml,env notin (ci,dev),gpu,!legacy"
    assert selectors.LabelSelector().describe() == "<everything>"
