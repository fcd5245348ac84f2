"""Where the scheduler's execution trace lives, from the environment: the file storage of its
blobs (``STORAGES["scheduler_traces"]``) and the database alias of its records, validated at
start like every other setting."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

from config.env import MASK, SettingError, env_str

TRACE_STORAGE_ALIAS = "scheduler_traces"
FILESYSTEM_STORAGE = "django.core.files.storage.FileSystemStorage"


def trace_storage_from_env() -> dict[str, Any]:
    """``SCHEDULER_TRACE_STORAGE_BACKEND`` (a storage class's dotted path; the file system under
    MEDIA_ROOT by default) and ``SCHEDULER_TRACE_STORAGE_OPTIONS`` (a JSON object of its
    options), e.g. django-storages' ``storages.backends.s3.S3Storage`` with
    ``{"bucket_name": "farm-traces"}`` for an S3-compatible bucket."""
    backend = env_str("SCHEDULER_TRACE_STORAGE_BACKEND", FILESYSTEM_STORAGE)
    module, _, name = backend.rpartition(".")
    if not module or not name.isidentifier():
        raise SettingError("SCHEDULER_TRACE_STORAGE_BACKEND", backend, "expected module.Class")
    try:
        found = importlib.util.find_spec(module)
    except ImportError:
        found = None
    if found is None:
        why = f"module {module} is not installed"
        raise SettingError("SCHEDULER_TRACE_STORAGE_BACKEND", backend, why)
    raw = env_str("SCHEDULER_TRACE_STORAGE_OPTIONS", "{}")
    try:
        options = json.loads(raw)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        # The options may hold credentials: never echoed.
        raise SettingError("SCHEDULER_TRACE_STORAGE_OPTIONS", MASK, "expected a JSON object")
    return {"BACKEND": backend, "OPTIONS": options}


def trace_database_from_env(databases: dict[str, Any]) -> str:
    """``SCHEDULER_TRACE_DATABASE``: the alias (of ``DATABASES``) the trace records go to."""
    alias = env_str("SCHEDULER_TRACE_DATABASE", "default")
    if alias not in databases:
        known = ", ".join(sorted(databases))
        raise SettingError("SCHEDULER_TRACE_DATABASE", alias, f"not a DATABASES alias ({known})")
    return alias
