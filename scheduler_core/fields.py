"""Reading fields of objects that anyone allowed to create or patch them may have written.

The apiserver checks a pod's types and label syntax, but an annotation value is any string
(up to 256 KiB for all of them), and files given to the simulator are checked by nothing.
These readers never raise, and what they return is never longer than a small bound: one
hostile object becomes a complaint about that object, not a crash or a memory leak.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

MAX_DIGITS = 18  # an int64 always holds it; Python's int() refuses strings past 4300 digits
SHOWN = 40  # characters of a value quoted in a message


def is_object(value: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether `value` is a JSON object: a dict as parsed, checked first because it is cheap (every admission
    request and pod passes here), or any other Mapping, which needs the slower ABC check."""
    return type(value) is dict or isinstance(value, Mapping)


def mapping(value: object) -> Mapping[str, Any]:
    """`value` if it is an object, else an empty one."""
    return value if is_object(value) else {}


def sequence(value: object) -> list[Any]:
    """`value` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def strings(value: object) -> dict[str, str]:
    """The string-to-string entries of an object (labels, annotations, a node selector)."""
    return {k: v for k, v in mapping(value).items() if isinstance(k, str) and isinstance(v, str)}


def controller_uid(metadata: Mapping[str, Any]) -> str | None:
    """The UID of the owner reference marked `controller` (the object that made this one), if any."""
    return next((str(ref.get("uid")) for ref in map(mapping, sequence(metadata.get("ownerReferences")))
                 if ref.get("controller") is True), None)


def natural(value: object) -> int | None:
    """A whole number written in 1 to MAX_DIGITS ASCII digits; None for anything else.

    `str.isdigit` alone accepts `"²"`, which `int` then refuses.
    """
    if isinstance(value, str) and 0 < len(value) <= MAX_DIGITS and value.isascii() and value.isdigit():
        return int(value)
    return None


def shown(value: object) -> str:
    """`value` quoted for a message; past SHOWN characters only its start and its length."""
    text = value if isinstance(value, str) else repr(value)
    return json.dumps(text[:SHOWN]) + _beyond(text)


def cut(text: str) -> str:
    """`text` for a message as it is; past SHOWN characters only its start and its length."""
    return text[:SHOWN] + _beyond(text)


def _beyond(text: str) -> str:
    return f"… ({len(text)} characters)" if len(text) > SHOWN else ""


@functools.lru_cache(maxsize=65536)
def instant(text: str) -> tuple[int, int]:
    """The instant an RFC 3339 time names, as (seconds, nanoseconds) since the epoch, remembered (the same start
    times are sorted by at every preemption dry run); a text that is not one is later than any instant."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return (2**62, 0)
    seconds = datetime.datetime.strptime(match["seconds"], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    offset = 0
    if match["zone"] not in ("Z", "z"):
        sign = 1 if match["zone"][0] == "+" else -1
        offset = sign * (int(match["zone"][1:3]) * 3600 + int(match["zone"][4:6]) * 60)
    return (int(seconds.timestamp()) - offset, int((match["fraction"] or "").ljust(9, "0")[:9]))


_RFC3339 = re.compile(r"(?P<seconds>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<fraction>\d+))?(?P<zone>[Zz]|[+-]\d\d:\d\d)")
