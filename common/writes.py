"""The shape every configuration write shares: validate a new row before anything is
written, then save it and what follows from it (its event, its scheduler rows) in one
transaction, so a refused row leaves nothing and an accepted one is never half-created."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import models, transaction

M = TypeVar("M", bound=models.Model)


def row_create(row: M, *, validate: Callable[[M], object], then: Callable[[M], object]) -> M:
    validate(row)
    with transaction.atomic():
        row.save()
        then(row)
    return row
