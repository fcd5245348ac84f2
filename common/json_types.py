"""The type of a value that crossed JSON (a device's reading, a command's parameters, a
rule's target): what ``json.loads`` can return, so code that reads one must narrow it."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
