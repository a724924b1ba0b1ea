"""Taints, tolerations, node selector terms and GPU model tokens, as Kubernetes defines them."""

import pytest

from scheduler_core import names, predicates

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
        (Tol("", "Equal", "x", ""), T("any", "x", "NoSchedule"), True),  # an empty key matches any (API refuses it)
        # Lt and Gt need the feature gate TaintTolerationComparisonOperators, off by default in v1.36
        (Tol("sla", "Gt", "750", "NoSchedule"), T("sla", "950", "NoSchedule"), False),
        (Tol("sla", "Gt", "950", "NoSchedule"), T("sla", "950", "NoSchedule"), False),
        (Tol("sla", "Bogus", "950", "NoSchedule"), T("sla", "950", "NoSchedule"), False),
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
        # what kube-scheduler cannot parse matches nothing, even NotIn
        ([{"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["not a label value"]}]}], {}, "n", False),
        ([{"matchExpressions": [{"key": "not a key", "operator": "DoesNotExist"}]}], {}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}], {"a": ""}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]}], {"a": "1"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["1"]}]}], {"a": "1"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1", "2"]}]}], {"a": "5"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Lt", "values": ["-5"]}]}], {"a": "-9"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["4"]}]}], {"a": "5_000"}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["4"]}]}], {"a": "9" * 18}, "n", True),
        # past int64
        ([{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["4"]}]}], {"a": "9" * 19}, "n", False),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n", "m"]}]}], {}, "n", False),
        ([{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}], {}, "n", False),
        ([{"matchExpressions": [{"key": "a", "operator": "In", "values": ["b c"]}]},  # ... while the others may match
          {"matchExpressions": [{"key": "a", "operator": "Exists"}]}], {"a": "1"}, "n", True),
        # matchFields is a field selector: a field the node lacks reads as ""; a node without a name has none
        ([{"matchFields": [{"key": "spec.podCIDR", "operator": "NotIn", "values": ["x"]}]}], {}, "n", True),
        ([{"matchFields": [{"key": "spec.podCIDR", "operator": "In", "values": [""]}]}], {}, "n", True),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}], {}, "", True),
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


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"matchExpressions": [{"key": "foo", "operator": "NotIn", "values": ["invalid value: x"]}]},
         f'matchExpressions[0].values[0]: {names.VALUE_RULE}, got "invalid value: x"'),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]},
                              {"key": "a/b/c", "operator": "Exists"}]},
         f'matchExpressions[1].key: a valid label key {names.NAME_RULE} with an optional DNS subdomain prefix and '
         "'/' (e.g. 'example.com/MyName'), got \"a/b/c\""),
        ({"matchFields": [{"key": "metadata.name", "operator": "Gt", "values": ["1"]}]},
         'matchFields[0].operator: must be one of In, NotIn, got "Gt"'),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
         "matchExpressions[0].values: must be exactly one integer for Gt and Lt"),
        ({"matchExpressions": {"key": "a"}}, "matchExpressions: must be a list, got \"{'key': 'a'}\""),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
         'matchExpressions[0].values: must be a list of strings, got "[1]"'),
    ],
)
def test_a_term_that_does_not_parse_says_why(raw, problem):
    assert predicates.parse_term(raw).problem == problem


@pytest.mark.parametrize(
    ("text", "number"),
    [("5", 5), ("+5", 5), ("-5", -5), ("0206", 206), ("0" * 30 + "7", 7), (str(2**63 - 1), 2**63 - 1),
     (str(2**63), None), (str(-(2**63)), -(2**63)), ("5_000", None), (" 5", None), ("5\n", None), ("٣", None),
     ("", None), ("+", None)],
)
def test_label_values_read_as_integers_as_go_reads_them(text, number):
    """Gt and Lt compare with strconv.ParseInt(value, 10, 64), stricter than Python's int()."""
    assert names.int64(text) == number


def test_names_end_where_the_text_ends():
    """Go's regexp `$` does not match before a final newline, as Python's does."""
    assert names.label_value_problem("gold\n") is not None
    assert names.qualified_name_problem("tier\n") is not None
