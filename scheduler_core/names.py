"""Kubernetes name syntax, with the apiserver's own rules.

The webhook checks every key and value a rule may write when the config loads: the apiserver
validates the mutated pod after our patch applies, and a key or label value it refuses would
reject the user's pod. The scheduler checks node affinity and pod affinity selectors with them, as
kube-scheduler parses a requirement whose key or values break them as one that matches no node, and
quotes apimachinery's messages, which are the words used here.
"""

from __future__ import annotations

import re

# fullmatch throughout: `$` alone also matches before a final newline, which Go's regexp does not
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT32 = re.compile(r"0|-?[1-9][0-9]*")
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 64) reads
# apimachinery's own messages, which kube-scheduler's parse errors and the apiserver's refusals quote
NAME_FORMAT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
NAME_RULE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              f"alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
              f"is '{NAME_FORMAT}')")
VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
               "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
               f"'12345', regex used for validation is '({NAME_FORMAT})?')")
SUBDOMAIN_RULE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                   "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def dns_subdomain_problem(value: str) -> str | None:
    """Why `value` is not an RFC 1123 subdomain (what schedulerName and key prefixes must be)."""
    if len(value) > 253:
        return "must be at most 253 characters"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')"
    return None


def qualified_name_problem(value: str) -> str | None:
    """Why `value` is not a label or annotation key (`[prefix/]name`), in the apiserver's words."""
    return "; ".join(label_key_errors(value)) or None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a label value (empty is allowed), in the apiserver's words."""
    return "; ".join(label_value_errors(value)) or None


def label_key_errors(key: str) -> list[str]:
    """content.IsLabelKey: an optional DNS subdomain prefix and '/', then a name of at most 63 bytes."""
    parts = key.split("/")
    if len(parts) > 2:
        return [f"a valid label key {NAME_RULE} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    errors = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix.encode()) > 253:
                errors.append("prefix part must be no more than 253 bytes")
            if not _DNS_SUBDOMAIN.fullmatch(prefix):
                errors.append(f"prefix part {SUBDOMAIN_RULE}")
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _NAME.fullmatch(name):
        errors.append(f"name part {NAME_RULE}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """content.IsLabelValue: empty, or at most 63 bytes of a name's characters."""
    errors = []
    if len(value.encode()) > 63:
        errors.append("must be no more than 63 bytes")
    if value and not _NAME.fullmatch(value):
        errors.append(VALUE_RULE)
    return errors


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
