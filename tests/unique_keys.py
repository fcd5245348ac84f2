"""The check every moved unique key gets: a copy of a stored row is absorbed by ``INSERT … ON
CONFLICT DO NOTHING`` (how the services absorb duplicates) while it repeats the key, and is
inserted once only the key differs, so the key alone absorbed it."""

from __future__ import annotations

from typing import Any

from django.db import models

from common.sql import insert_ignore_returning


def key_absorbs_copies(row: models.Model, key: str, other_value: Any, **changes: Any) -> None:
    """``changes`` move the copy off the row's other unique columns; ``other_value`` is a
    value of ``key`` no row holds."""
    model = type(row)
    values = {
        f.name: getattr(row, f.attname) for f in model._meta.concrete_fields if not f.primary_key
    }
    values.update(changes)
    assert insert_ignore_returning(model, [values]) == [], f"{key}: the copy was inserted"
    assert model._default_manager.filter(**{key: getattr(row, key)}).count() == 1
    values[key] = other_value
    assert len(insert_ignore_returning(model, [values])) == 1, f"{key}: not the only conflict"
