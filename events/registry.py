"""The one registry of the event bus: event types (name, current version, payload schema,
upcasters), the handlers each type is routed to, and the dead-letter alert listeners.

Routing is a lookup here, never a switch: a new consumer registers a handler from its app's
``event_handlers`` module (the post-processor seam of docs/spec.md §5) and nothing else changes.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import (
    Annotated,
    Any,
    Generic,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from django.core.exceptions import ImproperlyConfigured

from events.envelope import Envelope

P = TypeVar("P", bound=Mapping[str, Any])
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
HandlerFn = Callable[[Envelope], None]


@dataclass(frozen=True)
class DeadLetterAlert:
    """What operators are told about a new dead letter."""

    dead_letter_id: int
    event_type: str
    idempotency_key: str
    handler: str
    reason: str
    attempts: int
    last_error: str


DeadLetterListener = Callable[[DeadLetterAlert], None]


@dataclass(frozen=True)
class PayloadField:
    """One payload field; ``meaning`` comes from ``Annotated[type, "meaning"]`` in the schema."""

    name: str
    annotation: Any
    required: bool
    meaning: str = ""

    @property
    def type_name(self) -> str:
        return annotation_name(self.annotation)


@dataclass(frozen=True)
class EventType(Generic[P]):
    """A declared event: ``schema`` is the payload of the current ``version``; ``upcasters[v]``
    turns a version-``v`` payload into version ``v + 1``."""

    name: str
    version: int
    schema: type[P]
    description: str
    upcasters: Mapping[int, Upcaster] = field(default_factory=dict)

    def fields(self) -> tuple[PayloadField, ...]:
        return schema_fields(self.schema)

    def payload_errors(self, payload: Mapping[str, Any], *, allow_extra: bool) -> list[str]:
        """Why ``payload`` does not fit the current schema (empty when it does)."""
        errors: list[str] = []
        known = self.fields()
        for f in known:
            if f.name not in payload:
                if f.required:
                    errors.append(f"{f.name}: missing")
            elif not value_matches(payload[f.name], f.annotation):
                errors.append(f"{f.name}: expected {f.type_name}, got {payload[f.name]!r}")
        if not allow_extra:
            extra = sorted(set(payload) - {f.name for f in known})
            errors.extend(f"{name}: not in the schema" for name in extra)
        return errors

    def upcast(self, version: int, payload: dict[str, Any], accepts: frozenset[int]) -> int:
        """Upcast ``payload`` in place from ``version`` to the first version in ``accepts``;
        returns that version."""
        while version not in accepts:
            upgraded = self.upcasters[version](dict(payload))
            payload.clear()
            payload.update(upgraded)
            version += 1
        return version


@dataclass(frozen=True)
class EventHandler:
    """A consumer of one event type. ``name`` is stable: it keys the inbox and dead letters."""

    name: str
    event_type: str
    versions: frozenset[int]
    fn: HandlerFn
    description: str


class EventRejected(Exception):
    """Raised by a handler for an event it can never process (not a transient error): the
    event is dead-lettered at once with reason ``handler_rejected``, without retries."""


class EventRegistry:
    def __init__(self) -> None:
        self._types: dict[str, EventType[Any]] = {}
        self._handlers: dict[str, EventHandler] = {}
        self._listeners: list[DeadLetterListener] = []

    def declare(
        self,
        name: str,
        *,
        schema: type[P],
        description: str,
        version: int = 1,
        upcasters: Mapping[int, Upcaster] | None = None,
    ) -> EventType[P]:
        """Declare an event type; every older version needs an upcaster, so an old envelope
        always reaches handlers in a version they accept."""
        steps = dict(upcasters or {})
        if version < 1 or set(steps) != set(range(1, version)):
            raise ImproperlyConfigured(
                f"event {name} v{version}: upcasters must cover versions 1..{version - 1}"
            )
        declared = EventType(name, version, schema, description.strip(), steps)
        declared.fields()  # an unresolvable annotation fails here, at start-up
        existing = self._types.get(name)
        if existing is not None and existing != declared:
            raise ImproperlyConfigured(f"event type {name} is declared twice")
        self._types[name] = declared
        return declared

    def handler(
        self,
        event_type: EventType[Any] | str,
        *,
        name: str,
        versions: Iterable[int] | None = None,
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Register the decorated function for ``event_type``. ``versions`` are the payload
        versions it accepts (default: the current one); older envelopes are upcast to the
        oldest accepted version at or above theirs."""
        type_name = event_type if isinstance(event_type, str) else event_type.name

        def register(fn: HandlerFn) -> HandlerFn:
            declared = self._types.get(type_name)
            if declared is None:
                raise ImproperlyConfigured(f"handler {name}: event type {type_name} not declared")
            accepted = frozenset(versions or (declared.version,))
            if declared.version not in accepted or not accepted <= set(
                range(1, declared.version + 1)
            ):
                raise ImproperlyConfigured(
                    f"handler {name}: versions {sorted(accepted)} must include "
                    f"{declared.version} and none newer"
                )
            doc = (fn.__doc__ or "").strip().split("\n\n")[0]
            entry = EventHandler(name, type_name, accepted, fn, " ".join(doc.split()))
            existing = self._handlers.get(name)
            if existing is not None and not _same_function(existing.fn, fn):
                raise ImproperlyConfigured(f"event handler name {name} is registered twice")
            self._handlers[name] = entry
            return fn

        return register

    def dead_letter_listener(self, fn: DeadLetterListener) -> DeadLetterListener:
        """Register a function told about every new dead letter (e.g. operator notification)."""
        if fn not in self._listeners:
            self._listeners.append(fn)
        return fn

    def type_get(self, name: str) -> EventType[Any] | None:
        return self._types.get(name)

    def types(self) -> list[EventType[Any]]:
        return sorted(self._types.values(), key=lambda t: t.name)

    def handlers_for(self, type_name: str) -> list[EventHandler]:
        return sorted(
            (h for h in self._handlers.values() if h.event_type == type_name),
            key=lambda h: h.name,
        )

    def listeners(self) -> list[DeadLetterListener]:
        return list(self._listeners)

    @contextmanager
    def scope(self) -> Iterator[EventRegistry]:
        """Declarations made inside are forgotten on exit (tests, one-off tools)."""
        saved = (dict(self._types), dict(self._handlers), list(self._listeners))
        try:
            yield self
        finally:
            self._types, self._handlers, self._listeners = saved


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """The same handler registered again (a module imported twice) is not a name clash."""
    name_a, name_b = getattr(a, "__qualname__", None), getattr(b, "__qualname__", None)
    return a is b or (name_a is not None and (a.__module__, name_a) == (b.__module__, name_b))


@functools.cache
def schema_fields(schema: type[Any]) -> tuple[PayloadField, ...]:
    """The fields of a TypedDict (or dataclass) schema, resolved once per schema."""
    hints = get_type_hints(schema, include_extras=True)
    required = getattr(schema, "__required_keys__", frozenset(hints))
    found = []
    for name, hint in hints.items():
        meaning = ""
        if get_origin(hint) is Annotated:
            hint, *extras = get_args(hint)
            meaning = next((x for x in extras if isinstance(x, str)), "")
        found.append(PayloadField(name, hint, name in required, meaning))
    return tuple(found)


def value_matches(value: object, annotation: Any) -> bool:
    """A shallow JSON type check: the container, not its items."""
    if annotation is Any:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(value_matches(value, arg) for arg in get_args(annotation))
    if origin is Literal:
        return value in get_args(annotation)
    target = origin or annotation
    if isinstance(value, bool) and target is not bool:
        return False
    if target is float:
        return isinstance(value, int | float)
    return isinstance(value, target) if isinstance(target, type) else True


def annotation_name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


registry = EventRegistry()
event_type_declare = registry.declare
event_handler = registry.handler
dead_letter_listener = registry.dead_letter_listener
