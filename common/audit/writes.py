"""Writes that bypass a model's signals, audited all the same. django-auditlog follows
``save()`` and ``delete()``; the services change configuration with guarded UPDATEs
(compare-and-set), ``bulk_create`` and ``bulk_update``, which send no signal. A service
writes a followed model through these instead, and gets the same entries a ``save()`` would
have made: the rows' fields before and after, in the same transaction.

A model the log does not follow costs nothing more than the plain write."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from auditlog.diff import model_instance_diff
from auditlog.registry import auditlog
from django.db import transaction
from django.db.models import Model, QuerySet

from common.audit.models import AuditEntry

M = TypeVar("M", bound=Model)


def _log(action: int, old: Model | None, new: Model) -> None:
    changes = model_instance_diff(old, new)
    if changes:
        AuditEntry.objects.log_create(new, action=action, changes=changes)


def _log_moves(model: type[M], before: dict[Any, M]) -> None:
    after = model._base_manager.in_bulk(list(before))
    for pk, new in after.items():
        _log(AuditEntry.Action.UPDATE, before[pk], new)


def audited_update(rows: QuerySet[M], /, **fields: Any) -> int:
    """``rows.update(**fields)``, with an entry per row it changed. The rows are read and
    locked first (PostgreSQL), so the entry's "before" is what the update replaced; the
    number of rows updated is returned as ``update`` does, for the callers' compare-and-set."""
    if not auditlog.contains(rows.model):
        return rows.update(**fields)
    with transaction.atomic(using=rows.db):
        before = {row.pk: row for row in rows.select_for_update()}
        if not before:
            return 0
        count = rows.filter(pk__in=list(before)).update(**fields)
        _log_moves(rows.model, before)
    return count


def audited_fields(model: type[Model]) -> frozenset[str]:
    """The fields of ``model`` the log follows (none: it is not followed)."""
    if not auditlog.contains(model):
        return frozenset()
    return frozenset(auditlog.get_model_fields(model)["include_fields"])


def audited_write(model: type[M], pks: Collection[Any], write: Callable[[], set[Any]]) -> set[Any]:
    """Run ``write``, a guarded write of the rows ``pks`` that returns the keys of the rows it
    changed, with an entry per changed row: the rows are read and locked first (PostgreSQL),
    so an entry's "before" is what the write replaced (``common.ledger``'s moves)."""
    with transaction.atomic(savepoint=False):
        before = model._base_manager.select_for_update().in_bulk(list(pks))
        moved = write()
        _log_moves(model, {pk: before[pk] for pk in moved if pk in before})
    return moved


def audited_bulk_update(model: type[M], objs: Sequence[M], fields: Sequence[str]) -> int:
    """``bulk_update`` with an entry per row it changed."""
    if not auditlog.contains(model) or not objs:
        return model._default_manager.bulk_update(objs, fields)
    with transaction.atomic():
        pks = [obj.pk for obj in objs]
        before = model._base_manager.select_for_update().in_bulk(pks)
        count = model._default_manager.bulk_update(objs, fields)
        _log_moves(model, before)
    return count


def audited_bulk_create(model: type[M], objs: Iterable[M], **options: Any) -> list[M]:
    """``bulk_create`` with a create entry per row (the database returns their ids on
    PostgreSQL and on SQLite)."""
    made = model._default_manager.bulk_create(objs, **options)
    if auditlog.contains(model):
        for obj in made:
            if obj.pk is not None:
                _log(AuditEntry.Action.CREATE, None, obj)
    return made


def audited_event(instance: Model, *, changes: dict[str, list[str]]) -> None:
    """An entry for a change that is no column of the row: a device's broker password
    rotated (the password is never stored; the entry says only that it changed)."""
    AuditEntry.objects.log_create(instance, action=AuditEntry.Action.UPDATE, changes=changes)
