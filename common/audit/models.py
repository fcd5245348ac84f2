"""The log entry: django-auditlog's, with the organisation of the changed row and the
surface the change came through as columns of their own, so the API and the admin filter
on an index instead of inside a JSON document."""

from __future__ import annotations

from typing import Any

from auditlog.models import AbstractLogEntry, LogEntryManager
from django.db import models

from common.audit.surfaces import Surface


class AuditEntryManager(LogEntryManager):
    def log_create(self, instance: Any, force_log: bool = False, **kwargs: Any) -> Any:
        """django-auditlog calls this for every entry: the surface, the actor and the
        organisation are filled in here, so a signal-made entry and one written by
        ``common.audit.writes`` carry the same columns."""
        from common.audit.context import entry_context
        from common.audit.registry import organization_of

        for name, value in entry_context().items():
            kwargs.setdefault(name, value)
        kwargs.setdefault("organization_id", organization_of(instance))
        return super().log_create(instance, force_log, **kwargs)


class AuditEntry(AbstractLogEntry):
    """One create, update or delete of a configuration row (``AUDITLOG_LOGENTRY_MODEL``)."""

    organization_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    surface = models.CharField(max_length=16, choices=Surface.choices, default=Surface.SYSTEM)

    objects = AuditEntryManager()

    class Meta(AbstractLogEntry.Meta):
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        indexes = [models.Index(fields=["organization_id", "-id"], name="audit_org_newest")]
