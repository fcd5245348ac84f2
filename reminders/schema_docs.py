"""What the API docs say of each operation of the reminders part (``reminders.api``,
``reminders.user_messages_api``): a one-line summary and a description of its own. Kept apart
from the views so that each view reads as code; a view names its entry here
(``@schema_docs.REMINDER_SETTINGS``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view

REMINDER_SETTINGS = extend_schema_view(
    list=extend_schema(
        summary="List reminder settings",
        description="How the caller's farms, or whole organisations, are reminded: about "
        "documents before they expire (date based) or about an endpoint's metric crossing a "
        "threshold. Filter by farm or by whether a setting is active.",
    ),
    create=extend_schema(
        summary="Create a reminder setting",
        description="A setting for one farm or for every farm of an organisation (admin "
        "role): what it watches (`source_type`), when it fires (offsets in days before an "
        "expiry, or a threshold), at what local time, to whom and on which channels. Its "
        "first occurrences are scheduled at once.",
    ),
    retrieve=extend_schema(
        summary="Get a reminder setting",
        description="One setting with its revision, which moves with every change.",
    ),
    update=extend_schema(
        summary="Replace a reminder setting",
        description="Every editable field at once (admin role); the farm, organisation and "
        "source type stay as created. Pending occurrences are re-scheduled for what changed.",
    ),
    partial_update=extend_schema(
        summary="Change some of a reminder setting's fields",
        description="Only the fields named change (admin role); pending occurrences move to "
        "the new offsets or send time, and later sends use the new recipients and channels.",
    ),
    deactivate=extend_schema(summary="Deactivate a reminder setting"),
)

REPORT_SUBSCRIPTIONS = extend_schema_view(
    list=extend_schema(
        summary="List report subscriptions",
        description="The caller's farms' automation summaries, each delivered every day, week "
        "or month; filter by farm or by whether a subscription is active.",
    ),
    create=extend_schema(
        summary="Subscribe to a farm's report",
        description="A summary of a farm's automation (admin role), sent after each period of "
        "its recurrence at a local time in the farm's zone, to the recipients and on the "
        "channels named.",
    ),
    retrieve=extend_schema(
        summary="Get a report subscription",
        description="One subscription: its farm, recurrence, send time, recipients, template "
        "and channels.",
    ),
    update=extend_schema(
        summary="Replace a report subscription",
        description="Every field at once but the farm (admin role); the next runs move to "
        "the new recurrence or send time.",
    ),
    partial_update=extend_schema(
        summary="Change some of a report subscription's fields",
        description="Only the fields named change (admin role); `active: false` cancels the "
        "subscription's open runs, and template, channels or recipients apply from the next "
        "send.",
    ),
    run=extend_schema(summary="Run a report now"),
)

USER_MESSAGES = extend_schema_view(
    list=extend_schema(
        summary="List scheduled messages",
        description="Messages users scheduled to the caller's farms' people, with the date "
        "of each one's next send; filter by farm or status.",
    ),
    create=extend_schema(summary="Schedule a message"),
    retrieve=extend_schema(
        summary="Get a scheduled message",
        description="One message: its text, recipients, channels, schedule, status and its "
        "next and last send.",
    ),
    partial_update=extend_schema(summary="Change a scheduled message"),
    cancel=extend_schema(summary="Cancel a scheduled message"),
)
