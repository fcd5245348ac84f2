"""The one shape of every configuration write here (reminder settings, sources, report
subscriptions): validate before anything is written, then save the row and what follows from
it (its event, its scheduler rows) in one transaction, so a refused write leaves nothing and an
accepted one is never half-done. An update locks the row first and writes, stamps and follows
up only the fields that really changed."""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from django.db import models, transaction

from common.writes import row_create
from events.registry import EventType, P
from events.services import event_publish

M = TypeVar("M", bound=models.Model)


class Stamped(Protocol):
    updated_at: datetime


class Revised(Stamped, Protocol):
    revision: int  # +1 per write: the key of the event it publishes


class Published(Revised, Protocol):
    guid: uuid.UUID


def revision_publish(
    event_type: EventType[P], key: str, row: Published, payload: P, now: datetime
) -> None:
    """The row's event after commit, keyed ``{key}:{guid}:r{revision}``: the same write, the
    same key."""
    idempotency_key = f"{key}:{row.guid}:r{row.revision}"
    event_publish(event_type, idempotency_key=idempotency_key, payload=payload, occurred_at=now)


def stamp_updated(row: Stamped, now: datetime) -> list[str]:
    row.updated_at = now
    return ["updated_at"]


def stamp_revised(row: Revised, now: datetime) -> list[str]:
    row.updated_at, row.revision = now, row.revision + 1
    return ["updated_at", "revision"]


@dataclass(frozen=True)
class RowWrites(Generic[M]):
    """How one kind of row is written: which fields an update may change (others are refused
    with ``invalid``, naming ``what`` when given), the check a row must pass, and how a
    change is stamped."""

    model: type[M]
    editable: frozenset[str]
    invalid: Callable[[str], Exception]
    validate: Callable[[M], object]
    stamp: Callable[[M, datetime], list[str]]
    what: str = ""

    def create(
        self, fields: Mapping[str, object], *, now: datetime, then: Callable[[M], object]
    ) -> M:
        """A new row created at ``now``; ``then`` runs in its transaction."""
        row = self.model(**fields, created_at=now, updated_at=now)
        return row_create(row, validate=self.validate, then=then)

    def update(
        self,
        pk: int,
        changes: Mapping[str, object],
        *,
        now: datetime,
        then: Callable[[M, list[str]], object],
        same: Callable[[object, object], bool] = operator.eq,
    ) -> tuple[M, list[str]]:
        """The row and the names of the fields that really changed (by ``same``); nothing is
        written and ``then`` does not run when none did."""
        unknown = set(changes) - self.editable
        if unknown:
            where = f" on {self.what}" if self.what else ""
            raise self.invalid(f"not editable{where}: {', '.join(sorted(unknown))}")
        with transaction.atomic():
            row = self.model._default_manager.select_for_update().get(pk=pk)
            changed = [
                name for name, value in changes.items() if not same(getattr(row, name), value)
            ]
            if not changed:
                return row, []
            for name in changed:
                setattr(row, name, changes[name])
            self.validate(row)
            row.save(update_fields=[*changed, *self.stamp(row, now)])
            then(row, changed)
        return row, changed
