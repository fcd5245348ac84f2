"""Retention for every append-only table: each app declares what it keeps and for how long
(``retention_register``, from its ``retention`` module), and one prune deletes older rows in
bounded batches, oldest first, on an indexed time column.

A row still needed is never pruned. What "needed" means is read from the schema, not
repeated per table: a row another kept row points to (any foreign key whose ``on_delete`` is
not SET_NULL) stays until that row goes, so a command keeps its execution, the execution its
event, the event its telemetry. Rows declared ``children`` (a command's transitions and
receipts, a notification's attempts) go with their parent in the same transaction; a
SET_NULL reference is cleared as Django would. A table's own ``prunable`` filter keeps what
its state says is live (a command not ended, an event not processed).

Each batch is a fixed number of statements whatever its size (one read, one per child or
nulled reference, one delete); ``tests/common/test_retention.py`` counts them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache

from django.apps import apps
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from prometheus_client.core import GaugeMetricFamily

from common.partitions import (
    ahead_until,
    is_partitioned,
    partition_drop,
    partitions,
    partitions_ensure,
)

PRUNE_BATCH = 1000  # rows per batch
PRUNE_MAX_BATCHES = 20  # per table and run: the next run takes the rest
PRUNE_BUDGET_S = 20.0  # per run, so a run never outlives its beat period


@dataclass(frozen=True)
class Retention:
    """``label`` (``"app.Model"``) keeps rows for ``settings.<setting>`` days after
    ``time_field``; ``prunable`` narrows to rows whose state allows it (a function when it
    depends on the moment, read once per batch); ``children`` are the labels of tables whose
    rows go with their parent."""

    label: str
    setting: str
    time_field: str
    prunable: Q | Callable[[], Q] = field(default_factory=Q)
    children: tuple[str, ...] = ()
    # Labels of tables whose references do not keep a row here: they outlive it by design
    # (an execution is kept 180 days, its reading 30), so their key is no constraint.
    outlived_by: tuple[str, ...] = ()
    # PostgreSQL time partitions on ``time_field`` (``common.partitions``): whether a range
    # [lo, hi) still holds a row that must stay, so it cannot be dropped whole yet.
    partition_keep: Callable[[datetime, datetime], bool] | None = None

    def prunable_now(self) -> Q:
        return self.prunable() if callable(self.prunable) else self.prunable

    @property
    def model(self) -> type[models.Model]:
        return apps.get_model(self.label)

    def days(self) -> float:
        return float(getattr(settings, self.setting))


# In prune order: a parent table after the tables whose rows point at it.
_RETENTIONS: dict[str, Retention] = {}
_ORDER: list[str] = []


def retention_register(retention: Retention, *, before: tuple[str, ...] = ()) -> None:
    """Declare a table's retention. ``before``: labels this table must be pruned before (the
    tables it points at), so one run frees a whole chain oldest-first."""
    _RETENTIONS[retention.label] = retention
    if retention.label in _ORDER:
        _ORDER.remove(retention.label)
    positions = [_ORDER.index(label) for label in before if label in _ORDER]
    _ORDER.insert(min(positions) if positions else len(_ORDER), retention.label)


def retentions() -> list[Retention]:
    """Every declared retention, in prune order."""
    return [_RETENTIONS[label] for label in _ORDER]


@cache
def _references(model: type[models.Model]) -> list[models.ForeignKey]:  # type: ignore[type-arg]
    """Every foreign key of any model that points at ``model`` (hidden ones included); the
    schema does not change while a process runs, so it is read once per model."""
    found = []
    for other in apps.get_models(include_auto_created=True):
        for candidate in other._meta.concrete_fields:
            if isinstance(candidate, models.ForeignKey) and candidate.related_model is model:
                found.append(candidate)
    return found


def _candidates(retention: Retention, cutoff: datetime, batch: int) -> models.QuerySet:  # type: ignore[type-arg]
    model = retention.model
    rows = model._default_manager.filter(retention.prunable_now())
    rows = rows.filter(**{f"{retention.time_field}__lt": cutoff})
    children = {apps.get_model(label) for label in retention.children}
    outliving = {apps.get_model(label) for label in retention.outlived_by}
    for fk in _references(model):
        if fk.model in children | outliving or fk.remote_field.on_delete is models.SET_NULL:
            continue
        referrers = fk.model._default_manager.filter(**{fk.attname: OuterRef("pk")})
        rows = rows.filter(~Exists(referrers))
    rows = rows.order_by(retention.time_field)
    if connection.features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return rows.values_list("pk", flat=True)[:batch]


def _prune_batch(retention: Retention, cutoff: datetime, batch: int) -> int:
    """One batch in one transaction: the rows' children, their SET_NULL references, the
    rows; the number of rows deleted."""
    model = retention.model
    children = {apps.get_model(label) for label in retention.children}
    outliving = {apps.get_model(label) for label in retention.outlived_by}
    with transaction.atomic():
        ids = list(_candidates(retention, cutoff, batch))
        if not ids:
            return 0
        for fk in _references(model):
            if fk.model in outliving:
                continue
            referrers = fk.model._default_manager.filter(**{f"{fk.attname}__in": ids})
            if fk.model in children and fk.model is not model:
                referrers._raw_delete(referrers.db)
            elif fk.remote_field.on_delete is models.SET_NULL:
                referrers.update(**{fk.attname: None})
        doomed = model._default_manager.filter(pk__in=ids)
        return int(doomed._raw_delete(doomed.db))


@dataclass
class PruneResult:
    deleted: dict[str, int] = field(default_factory=dict)


def retention_prune(
    *,
    now: datetime,
    batch: int = PRUNE_BATCH,
    max_batches: int = PRUNE_MAX_BATCHES,
    budget_s: float = PRUNE_BUDGET_S,
    on_batch: Callable[[str, int], None] | None = None,
) -> PruneResult:
    """Prune every declared table older than its retention, in prune order; each table stops
    at a short batch, at ``max_batches`` or when the run's ``budget_s`` is spent."""
    result = PruneResult()
    deadline = time.monotonic() + budget_s
    done: list[Retention] = []
    for retention in retentions():
        cutoff = now - timedelta(days=retention.days())
        total = 0
        if retention.partition_keep is not None:
            total += _partitions_prune(retention, now, cutoff, done, on_batch)
        done.append(retention)
        for _ in range(max_batches):
            deleted = _prune_batch(retention, cutoff, batch)
            total += deleted
            if on_batch is not None and deleted:
                on_batch(retention.label, deleted)
            if deleted < batch or time.monotonic() > deadline:
                break
        result.deleted[retention.label] = total
        if time.monotonic() > deadline:
            break
    return result


def _partitions_prune(
    retention: Retention,
    now: datetime,
    cutoff: datetime,
    done: list[Retention],
    on_batch: Callable[[str, int], None] | None,
) -> int:
    """PostgreSQL: create the ranges ahead, then drop each range wholly past ``cutoff`` that
    keeps nothing and that no partitioned table pruned before this one (a table pointing
    here by the same device time) still covers. The rows dropped."""
    table = retention.model._meta.db_table
    if not is_partitioned(table):
        return 0
    time_field = retention.model._meta.get_field(retention.time_field)
    assert isinstance(time_field, models.Field)
    key = str(time_field.column)
    span = int(settings.TELEMETRY_PARTITION_SPAN_S)
    partitions_ensure(
        table, key, start=now - timedelta(seconds=span), end=ahead_until(now), span_s=span
    )
    referring = [partitions(r.model._meta.db_table) for r in done if r.partition_keep is not None]
    dropped = 0
    assert retention.partition_keep is not None
    for part in partitions(table):
        if part.hi > cutoff:
            break
        covered = any(o.lo < part.hi and part.lo < o.hi for parts in referring for o in parts)
        if covered or retention.partition_keep(part.lo, part.hi):
            continue
        rows = partition_drop(table, part)
        dropped += rows
        if on_batch is not None and rows:
            on_batch(retention.label, rows)
    return dropped


def retention_oldest(*, now: datetime) -> dict[str, float | None]:
    """The age in seconds of each table's oldest row (None: empty), one index probe each."""
    ages: dict[str, float | None] = {}
    for retention in retentions():
        # A row not timed yet (a rollout not ended: ``ended_at`` is null) has no age.
        timed = {f"{retention.time_field}__isnull": False}
        rows = retention.model._default_manager.filter(**timed).order_by(retention.time_field)
        oldest = rows.values_list(retention.time_field, flat=True).first()
        ages[retention.label] = None if oldest is None else (now - oldest).total_seconds()
    return ages


def retention_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """``farm_retention_oldest_row_age_seconds`` per table: a prune that stopped keeping up
    shows as an age past the table's retention."""
    family = GaugeMetricFamily(
        "farm_retention_oldest_row_age_seconds",
        "Age of the oldest row of each table with a retention (0: empty).",
        labels=["table"],
    )
    for label, age in retention_oldest(now=now).items():
        family.add_metric([label], age or 0.0)
    yield family
