"""Kubernetes name syntax, checked before a value reaches a patch.

The apiserver validates the mutated pod after our patch applies: an annotation key or
label value it refuses would reject the user's pod. So every key and value a rule may
write is checked here, when the config loads, with the apiserver's own rules.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT32 = re.compile(r"^(0|-?[1-9][0-9]*)$")


def dns_subdomain_problem(value: str) -> str | None:
    """Why `value` is not an RFC 1123 subdomain (what schedulerName and key prefixes must be)."""
    if len(value) > 253:
        return "must be at most 253 characters"
    if not _DNS_SUBDOMAIN.match(value):
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
    if not _NAME.match(name):
        return "name part must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a label value (empty is allowed)."""
    if len(value) > 63:
        return "must be at most 63 characters"
    if value and not _NAME.match(value):
        return "must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric"
    return None


def is_canonical_int32(value: str) -> bool:
    """What the apiserver accepts for `controller.kubernetes.io/pod-deletion-cost`."""
    return bool(_INT32.match(value)) and -(2**31) <= int(value) <= 2**31 - 1
