"""What the API docs say of the audit log's operations (``common.audit.api``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view

AUDIT = extend_schema_view(
    list=extend_schema(
        summary="List configuration changes",
        description="Who created, changed or deleted which configuration row of the caller's "
        "organisations, when and through which surface (api, admin, command, system), with "
        "each changed field before and after; secrets show as a mask. Organisation admins "
        "only. Newest first, paged by cursor; `object_type` with `object_id` (one row), "
        "`actor` (a user id) and `since`/`until` (ISO 8601) narrow the list. A malformed "
        "filter is a 400 naming it.",
    ),
    retrieve=extend_schema(
        summary="Get a configuration change",
        description="One entry of the audit log (organisation admins only).",
    ),
)
