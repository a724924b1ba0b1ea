"""Kubernetes name syntax, with the apiserver's own rules.

The webhook checks every key and value a rule may write when the config loads: the apiserver
validates the mutated pod after our patch applies, and a key or label value it refuses would
reject the user's pod. The scheduler checks node affinity with them, as kube-scheduler parses
a requirement whose key or values break them as one that matches no node.
"""

from __future__ import annotations

import re

# fullmatch throughout: `$` alone also matches before a final newline, which Go's regexp does not
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT32 = re.compile(r"0|-?[1-9][0-9]*")
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 64) reads


def dns_subdomain_problem(value: str) -> str | None:
    """Why `value` is not an RFC 1123 subdomain (what schedulerName and key prefixes must be)."""
    if len(value) > 253:
        return "must be at most 253 characters"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')"
    return None


def qualified_name_problem(value: str) -> str | None:
    """Why `value` is not a label or annotation key (`[prefix/]name`)."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return "must not start with '/'"
    if slash:
        problem = dns_subdomain_problem(prefix)
        if problem:
            return f"prefix {problem}"
    if not name:
        return "must have a name part"
    if len(name) > 63:
        return "name part must be at most 63 characters"
    if not _NAME.fullmatch(name):
        return "name part must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a label value (empty is allowed)."""
    if len(value) > 63:
        return "must be at most 63 characters"
    if value and not _NAME.fullmatch(value):
        return "must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def is_canonical_int32(value: str) -> bool:
    """What the apiserver accepts for `controller.kubernetes.io/pod-deletion-cost`."""
    return bool(_INT32.fullmatch(value)) and -(2**31) <= int(value) <= 2**31 - 1


def int64(value: str) -> int | None:
    """`value` as Go's strconv.ParseInt(value, 10, 64) reads it (what label selectors' Gt and Lt
    compare), or None where that fails: no spaces, underscores or non-ASCII digits, as `int` allows."""
    if not _DECIMAL.fullmatch(value) or len(value.lstrip("+-").lstrip("0")) > 19:
        return None  # past 19 digits it cannot be an int64 (and `int` refuses 4300)
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None
