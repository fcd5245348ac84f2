"""What the API docs say of each operation on alarms (``alarms.api``): a one-line summary and
a description of its own. Kept apart from the views so that each view reads as code; the view
names its entry here (``@schema_docs.ALARMS``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view

COMMENT_EXAMPLES = [
    OpenApiExample(
        "On the way",
        value={"comment": "heater checked, sensor cable reseated"},
        request_only=True,
    ),
]

ALARMS = extend_schema_view(
    list=extend_schema(
        summary="List alarms",
        description="The alarms of the caller's organisations, newest first, paged by "
        "cursor; `farm`, `status` (active, acknowledged, cleared) and `severity` (critical, "
        "major, minor, warning) narrow the list. An unknown status or severity is a 400.",
    ),
    retrieve=extend_schema(
        summary="Get an alarm",
        description="One alarm: its source, type, severity and status, when it was first "
        "and last raised and how often, and who acknowledged or cleared it, with their "
        "comments.",
    ),
    acknowledge=extend_schema(
        summary="Acknowledge an alarm",
        description="Someone is on it: its repeated notifications stop. The comment is kept "
        "with the caller's user name in its audit trail (operator role). An alarm that is "
        "not active any more is a 409.",
        examples=COMMENT_EXAMPLES,
    ),
    clear=extend_schema(
        summary="Clear an alarm",
        description="Close an active or acknowledged alarm by hand (operator role); the next "
        "raise of the same condition opens a new alarm. The comment is kept with the caller's "
        "user name. An alarm cleared already is a 409.",
        examples=COMMENT_EXAMPLES,
    ),
    timeline=extend_schema(
        summary="Get an alarm's audit trail",
        description="Every status move of the alarm, oldest first: raised, acknowledged, "
        "cleared, each with its actor (a user name or a cause) and comment.",
    ),
)
