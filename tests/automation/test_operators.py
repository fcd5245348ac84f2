"""Each rule operator, including type mismatches that must not match (or raise)."""

from __future__ import annotations

import pytest

from automation.operators import operator_matches, values_equal


@pytest.mark.parametrize(
    ("operator", "value", "low", "high", "expected"),
    [
        ("gt", 31, 30, None, True),
        ("gt", 30, 30, None, False),
        ("gte", 30, 30, None, True),
        ("gte", 29.9, 30, None, False),
        ("lt", 29, 30, None, True),
        ("lt", 30, 30, None, False),
        ("lte", 30, 30, None, True),
        ("lte", 30.1, 30, None, False),
        ("eq", 30, 30.0, None, True),
        ("eq", True, True, None, True),
        ("eq", True, 1, None, False),
        ("eq", "auto", "auto", None, True),
        ("neq", 30, 31, None, True),
        ("neq", False, False, None, False),
        ("between", 20, 10, 20, True),
        ("between", 10, 10, 20, True),
        ("between", 21, 10, 20, False),
        ("outside", 21, 10, 20, True),
        ("outside", 15, 10, 20, False),
        ("outside", 9.99, 10, 20, True),
        ("gt", "31", 30, None, False),
        ("gt", True, 0, None, False),
        ("between", 15, 10, None, False),
        ("lt", None, 30, None, False),
        ("nope", 1, 1, None, False),
    ],
)
def test_operator(operator, value, low, high, expected) -> None:
    assert operator_matches(operator, value, low, high) is expected


def test_bool_is_not_a_number_for_equality() -> None:
    assert values_equal(True, True)
    assert not values_equal(True, 1)
    assert not values_equal(0, False)
    assert values_equal(1, 1.0)
