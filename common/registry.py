"""One registry helper for everything apps plug in by key (scheduler handlers per automation
type, reminder providers per source type): thread-safe, a second registration of a key is a
bug unless the caller says it may replace, and tests can swap an entry for a block."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

V = TypeVar("V")


class Registry(Generic[V]):
    def __init__(self, what: str, *, same: Callable[[V, V], bool] | None = None) -> None:
        """``what`` names the entries in errors; ``same`` says when registering a key again is
        the same registration (a module imported twice) rather than a conflict."""
        self._what = what
        self._same = same
        self._entries: dict[str, V] = {}
        self._lock = threading.Lock()

    def register(self, key: str, value: V, *, replace: bool = False) -> None:
        with self._lock:
            existing = self._entries.get(key)
            conflict = existing is not None and not (self._same and self._same(existing, value))
            if conflict and not replace:
                raise ValueError(f"{self._what} for {key!r} is already registered")
            self._entries[key] = value

    def unregister(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def get(self, key: str) -> V | None:
        return self._entries.get(key)

    def keys(self) -> list[str]:
        return sorted(self._entries)

    @contextmanager
    def override(self, key: str, value: V) -> Iterator[V]:
        """``value`` in place of the key's entry for the duration of a block."""
        with self._lock:
            previous = self._entries.get(key)
            self._entries[key] = value
        try:
            yield value
        finally:
            with self._lock:
                if previous is None:
                    self._entries.pop(key, None)
                else:
                    self._entries[key] = previous
