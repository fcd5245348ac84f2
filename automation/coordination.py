"""Redis duties (docs/spec.md §8) through Django's cache: correlation, inflight markers, locks.

Every function here is a fast path only. A cache miss, a flushed Redis or a cache error
falls back to the database, which decides; nothing here can lose or duplicate work.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache

logger = logging.getLogger(__name__)

CORRELATION_TTL_S = 6 * 3600


def _safe(op: str, default: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the cache is never allowed to break the pipeline
        logger.warning("coordination cache %s failed: %s", op, exc)
        return default


def correlations_remember(pairs: dict[str, int]) -> None:
    """Many commandId -> command id entries in one round trip (a dispatched batch)."""
    entries = {f"cmd:{command_id}": pk for command_id, pk in pairs.items()}
    _safe("set_many", None, cache.set_many, entries, CORRELATION_TTL_S)


def correlation_lookup(command_ids: list[str]) -> dict[str, int]:
    """commandId -> command id for the ids the cache knows; callers query the rest."""
    found = _safe("get_many", {}, cache.get_many, [f"cmd:{c}" for c in command_ids])
    return {key[4:]: int(value) for key, value in found.items()}


def inflights_mark(holders: dict[int, int], ttl_s: float) -> None:
    """endpoint id -> holding command id for a claimed batch, in one round trip."""
    entries = {f"inflight:{endpoint_id}": pk for endpoint_id, pk in holders.items()}
    _safe("set_many", None, cache.set_many, entries, max(1, int(ttl_s)))


def inflight_holders(endpoint_ids: list[int]) -> dict[int, int]:
    """endpoint id -> the command the cache says holds it, for those it knows."""
    found = _safe("get_many", {}, cache.get_many, [f"inflight:{pk}" for pk in endpoint_ids])
    return {int(key.split(":", 1)[1]): int(value) for key, value in found.items()}


def inflights_clear(endpoint_ids: list[int]) -> None:
    _safe("delete_many", None, cache.delete_many, [f"inflight:{pk}" for pk in endpoint_ids])


def lock_try(name: str, ttl_s: float) -> bool:
    """Best-effort mutual exclusion (e.g. one sweep at a time across beats); True on error,
    because every locked section is also safe to run twice."""
    return bool(_safe("add", True, cache.add, f"lock:{name}", 1, max(1, int(ttl_s))))
