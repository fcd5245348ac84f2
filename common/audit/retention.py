"""What the audit log keeps (``common.retention``): every entry for
``RETENTION_AUDIT_DAYS`` after it was written, pruned oldest first in bounded batches."""

from __future__ import annotations

from common.retention import Retention, retention_register


def audit_retention_register() -> None:
    retention_register(Retention("audit.AuditEntry", "RETENTION_AUDIT_DAYS", "timestamp"))
