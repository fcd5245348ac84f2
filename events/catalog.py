"""The event catalogue as Markdown, rendered from the registry alone, so the document cannot
drift from the code (``manage.py event_catalog --check`` and a test fail when it does)."""

from __future__ import annotations

from typing import Any

from events.envelope import ENVELOPE_FIELDS
from events.registry import EventRegistry, EventType

ENVELOPE_MEANING = {
    "event_id": "UUID, new for every publish (a replay or republish gets a new one)",
    "idempotency_key": "stable per business fact; consumers deduplicate by it, never by event_id",
    "type": "the event type below",
    "occurred_at": "when the fact happened, UTC ISO-8601",
    "producer": "the deployment that published it (`EVENT_PRODUCER`)",
    "version": "payload version; older ones are upcast before reaching a handler",
    "payload": "the type's fields below",
}


def catalog_markdown(registry: EventRegistry) -> str:
    types = registry.types()
    lines = [
        "# Domain event catalogue",
        "",
        "Generated from the event registry (`events/registry.py`) by "
        "`manage.py event_catalog`; do not edit by hand.",
        "`manage.py event_catalog --check` and the test suite fail when this file is stale.",
        "",
        "## Envelope",
        "",
        "| field | meaning |",
        "|---|---|",
        *(f"| `{name}` | {ENVELOPE_MEANING[name]} |" for name in ENVELOPE_FIELDS),
        "",
        "Published after the business transaction commits (queue `events`); a failed publish "
        "is logged as `EVENT_PUBLISH_FAILED`. Each handler runs once per `idempotency_key`; "
        "after `EVENT_MAX_ATTEMPTS` failures, or for an unknown type or newer version, the "
        "envelope goes to the dead-letter table (`manage.py dlq`) and `EVENT_DEAD_LETTERED` "
        "is logged.",
        "",
        "## Types",
        "",
        "| type | version | handlers |",
        "|---|---|---|",
    ]
    for declared in types:
        count = len(registry.handlers_for(declared.name))
        anchor = declared.name.lower()
        lines.append(f"| [{declared.name}](#{anchor}) | {declared.version} | {count} |")
    for declared in types:
        lines.extend(["", *_type_section(registry, declared)])
    return "\n".join(lines) + "\n"


def _type_section(registry: EventRegistry, declared: EventType[Any]) -> list[str]:
    lines = [
        f"### {declared.name}",
        "",
        " ".join(declared.description.split()),
        "",
        f"Current version: {declared.version}. Payload (`{declared.schema.__name__}`):",
        "",
        "| field | type | required | meaning |",
        "|---|---|---|---|",
        *(
            f"| `{f.name}` | `{_cell(f.type_name)}` | {'yes' if f.required else 'no'} "
            f"| {_cell(f.meaning) or '—'} |"
            for f in declared.fields()
        ),
        "",
    ]
    if declared.upcasters:
        steps = ", ".join(f"v{v} → v{v + 1}" for v in sorted(declared.upcasters))
        lines.extend([f"Upcasters: {steps}.", ""])
    handlers = registry.handlers_for(declared.name)
    if not handlers:
        lines.append("Handlers: none registered yet (the event is published and acknowledged).")
        return lines
    lines.extend(["| handler | accepts versions | purpose |", "|---|---|---|"])
    for handler in handlers:
        versions = ", ".join(str(v) for v in sorted(handler.versions))
        lines.append(f"| `{handler.name}` | {versions} | {_cell(handler.description) or '—'} |")
    return lines


def _cell(text: str) -> str:
    """A table cell: a pipe, even inside a code span, would end the cell."""
    return text.replace("|", "\\|")
