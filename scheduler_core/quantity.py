"""Kubernetes resource quantities (`500m`, `40Gi`, `1e3`) as exact numbers.

Upstream `resource.Quantity` is exact decimal arithmetic; Fractions keep that, so sums
of requests never drift and comparisons against allocatable are exact. As upstream, a
quantity is rounded up to whole billionths and no quantity exceeds 2**63 - 1 in magnitude:
the apiserver accepts a number of thousands of digits, and parsing it, or `1e2000000000`,
costs little more than parsing `1`.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from decimal import Decimal
from fractions import Fraction

from scheduler_core import fields

LARGEST = 2**63 - 1  # upstream's cap ("no quantity may represent a number greater than 2^63-1")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# ASCII digits only (`\d` alone also takes "٣"); possessive, so a long string that fails to
# match is not tried again at every split of its digits
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d++(?:\.\d*+)?|\.\d++))"
    r"(?:(?P<exponent>[eE][+-]?\d{1,18})|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)",
    re.ASCII,
)
_NANO = Decimal("1e-9")
# Forty digits reach from LARGEST down past a billionth, so rounding up to forty digits first
# never changes what rounding up to billionths gives.
_ROUND_UP = decimal.Context(prec=40, rounding=decimal.ROUND_UP, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse(value: object) -> Fraction:
    """Parse a quantity as the apiserver does; ints and floats are taken as they are."""
    if isinstance(value, str) and len(value) <= MAX_CACHED:
        return _parse_text(value)
    return _parse(value)


MAX_CACHED = 64  # characters: real quantities are short, and a cache keyed by hostile text must stay small


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """The few quantity strings pods repeat ("1", "500m", "16Gi"), parsed once: the webhook and the scheduler read
    every pod's requests, and Decimal arithmetic is most of that cost."""
    return _parse(value)


def _parse(value: object) -> Fraction:
    amount = _capped(_decimal(value))
    return Fraction(_ROUND_UP.quantize(_ROUND_UP.plus(amount), _NANO))


def _decimal(value: object) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity, got {fields.cut(repr(value))}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float) and math.isfinite(value):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"expected a quantity, got {fields.cut(repr(value))}")
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise QuantityError(f"{fields.cut(repr(value))} is not a quantity (like 2, 500m, 40Gi)")
    suffix = match["suffix"] or ""
    amount = _capped(Decimal(match["number"] + (match["exponent"] or f"e{_DECIMAL.get(suffix, 0)}")))
    return _ROUND_UP.multiply(amount, _BINARY[suffix]) if suffix in _BINARY else amount


def _capped(amount: Decimal) -> Decimal:
    """Within ±LARGEST, before any arithmetic, so none has to work on a number of a billion digits."""
    return max(-Decimal(LARGEST), min(amount, Decimal(LARGEST)))
