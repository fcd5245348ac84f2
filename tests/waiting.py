"""Waiting for something another thread or process does (a worker, a bridge, a broker), with
a deadline that names what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_S = 30.0  # a loaded 2-core machine can stall a broker or a worker for seconds


def wait_for(
    predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S, poll_s: float = 0.05
) -> Any:
    """The predicate's first truthy value, or an AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
