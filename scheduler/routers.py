"""The execution trace (``TraceRecord``) may live in a database of its own
(``SCHEDULER_TRACE_DATABASE``): this router sends its reads, writes and migrations there and
keeps every other table off that database. With the default alias it changes nothing."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Model

TRACE_MODEL = ("scheduler", "tracerecord")


def _is_trace(model: type[Model] | None) -> bool:
    return model is not None and (model._meta.app_label, model._meta.model_name) == TRACE_MODEL


class SchedulerTraceRouter:
    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return str(settings.SCHEDULER_TRACE_DATABASE) if _is_trace(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return str(settings.SCHEDULER_TRACE_DATABASE) if _is_trace(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        return None  # the trace holds plain ids, never a relation

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        """The trace table only on its database; nothing else on a separate trace database."""
        trace_db = settings.SCHEDULER_TRACE_DATABASE
        if (app_label, model_name) == TRACE_MODEL:
            return db == trace_db
        if db == trace_db and trace_db != "default":
            return False
        return None
