"""The file storage of trace blobs (large inputs and diagnostics of an execution), through
Django's storage API: ``STORAGES["scheduler_traces"]`` (files under MEDIA_ROOT by default, an
S3-compatible bucket through django-storages in production), or the ``default`` storage when
a settings module declares no such alias. A storage error never decides a row's outcome."""

from __future__ import annotations

import json
import logging
import mimetypes
import posixpath
from typing import IO

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from config.env_trace import TRACE_STORAGE_ALIAS
from scheduler.registry import SchedulerJob, Trace

logger = logging.getLogger(__name__)


def trace_storage() -> Storage:
    alias = TRACE_STORAGE_ALIAS if TRACE_STORAGE_ALIAS in settings.STORAGES else "default"
    return storages[alias]


def trace_blob_save(job: SchedulerJob, label: str, trace: Trace | None) -> str:
    """Write an execution's diagnostics; the name (for TraceBlobName and the trace record),
    or "" when there is nothing to write or the storage refused it (logged)."""
    if trace is None:
        return ""
    if isinstance(trace, bytes):
        body, suffix = trace, "bin"
    elif isinstance(trace, str):
        body, suffix = trace.encode(), "txt"
    else:
        envelope = {"schedulerKey": job.scheduler_key, "token": job.token, "outcome": label}
        envelope.update(trace)
        body, suffix = json.dumps(envelope, default=str, indent=1).encode(), "json"
    name = f"{settings.SCHEDULER_TRACE_PREFIX}/{job.scheduler_id}/v{job.token}-{label}.{suffix}"
    try:
        return str(trace_storage().save(name, ContentFile(body)))
    except Exception as exc:
        logger.warning("scheduler trace %s not written: %s", name, exc)
        return ""


def trace_blob_open(name: str) -> IO[bytes] | None:
    """The blob to stream, or None if it is gone (pruned) or the storage cannot be read."""
    try:
        return trace_storage().open(name, "rb")  # type: ignore[no-any-return]
    except Exception as exc:
        logger.info("scheduler trace %s not readable: %s", name, exc)
        return None


def trace_blob_content_type(name: str) -> str:
    guessed, _ = mimetypes.guess_type(posixpath.basename(name))
    return guessed or "application/octet-stream"


def trace_blob_delete(name: str) -> bool:
    """Delete one blob (a missing one counts as deleted); False if the storage failed."""
    try:
        trace_storage().delete(name)
    except Exception as exc:
        logger.warning("scheduler trace %s not deleted: %s", name, exc)
        return False
    return True
