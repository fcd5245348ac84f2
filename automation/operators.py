"""Rule operators as pure functions, and how a condition reads on a page (``> 30 °C``). A
comparison between incompatible types is False (the rule does not match), never an exception
that fails the event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from automation.models import Operator
from devices.display import endpoint_value_text
from devices.models import DeviceProfileEndpoint


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _ordered(test: Callable[[float, float], bool]) -> Callable[[Any, Any, Any], bool]:
    def check(value: Any, low: Any, _high: Any) -> bool:
        v, t = _num(value), _num(low)
        return v is not None and t is not None and test(v, t)

    return check


def _range(inside: bool) -> Callable[[Any, Any, Any], bool]:
    def check(value: Any, low: Any, high: Any) -> bool:
        v, lo, hi = _num(value), _num(low), _num(high)
        if v is None or lo is None or hi is None:
            return False
        within = lo <= v <= hi
        return within if inside else not within

    return check


def _equal(value: Any, other: Any) -> bool:
    if isinstance(value, bool) or isinstance(other, bool):
        return type(value) is type(other) and value == other
    return value == other


OPERATORS: dict[str, Callable[[Any, Any, Any], bool]] = {
    Operator.GT: _ordered(lambda v, t: v > t),
    Operator.GTE: _ordered(lambda v, t: v >= t),
    Operator.LT: _ordered(lambda v, t: v < t),
    Operator.LTE: _ordered(lambda v, t: v <= t),
    Operator.EQ: lambda v, t, _h: _equal(v, t),
    Operator.NEQ: lambda v, t, _h: not _equal(v, t),
    Operator.BETWEEN: _range(inside=True),
    Operator.OUTSIDE: _range(inside=False),
}


def operator_matches(operator: str, value: Any, threshold: Any, threshold_high: Any = None) -> bool:
    """True when ``value`` satisfies the rule's condition; unknown operators never match."""
    check = OPERATORS.get(operator)
    return bool(check and check(value, threshold, threshold_high))


def values_equal(a: Any, b: Any) -> bool:
    """Equality used for 'already in state' and applied evidence (True is not 1)."""
    return _equal(a, b)


# How an operator reads: its sign where it has one, and in the forms' choices with its words.
OPERATOR_SIGNS: dict[str, str] = {
    Operator.GT: ">",
    Operator.GTE: "≥",
    Operator.LT: "<",
    Operator.LTE: "≤",
    Operator.EQ: "=",
    Operator.NEQ: "≠",
    Operator.BETWEEN: "between",
    Operator.OUTSIDE: "outside",
    Operator.SILENT_FOR: "silent for",
}
OPERATOR_WORDS: dict[str, str] = {
    Operator.GT: "greater than",
    Operator.GTE: "at least",
    Operator.LT: "less than",
    Operator.LTE: "at most",
    Operator.EQ: "equal to",
    Operator.NEQ: "not equal to",
    Operator.BETWEEN: "low and high, both included",
    Operator.OUTSIDE: "below low or above high",
    Operator.SILENT_FOR: "no reading for this many seconds",
}
OPERATOR_CHOICES: list[tuple[str, str]] = [
    (str(op), f"{OPERATOR_SIGNS[op]} ({OPERATOR_WORDS[op]})") for op in Operator
]
RANGES = frozenset({Operator.BETWEEN, Operator.OUTSIDE})


def condition_text(
    operator: str, low: Any, high: Any = None, endpoint: DeviceProfileEndpoint | None = None
) -> str:
    """``> 30 °C``, ``= true``, ``between 18 °C and 30 °C``: the values in the type and unit
    of ``endpoint`` (the condition's profile endpoint)."""
    sign = OPERATOR_SIGNS.get(operator, operator)
    shown = endpoint_value_text(low, endpoint)
    if operator == Operator.SILENT_FOR:
        return f"{sign} {low} s"
    if operator in RANGES:
        return f"{sign} {shown} and {endpoint_value_text(high, endpoint)}"
    return f"{sign} {shown}"
