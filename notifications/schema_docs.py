"""What the API docs say of each operation of the notifications part (``notifications.api``,
``notifications.contacts_api``): a one-line summary and a description of its own. Kept apart
from the views so that each view reads as code; a view names its entry here
(``@schema_docs.INBOX_LIST``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view

INBOX_LIST = extend_schema_view(
    get=extend_schema(
        summary="List my inbox",
        description="The caller's own in-app notifications, newest first, paged by number "
        "with a count; `unread=true` lists only the unread ones.",
    ),
)

INBOX_READ = extend_schema_view(
    post=extend_schema(
        summary="Mark an inbox item read",
        description="The item is read from now on (marking it again changes nothing). Another "
        "user's item is a 404.",
    ),
)

NOTIFICATIONS = extend_schema_view(
    list=extend_schema(
        summary="List notifications",
        description="Every notification sent, or to be sent, about the caller's farms, newest "
        "first, paged by cursor; filter by status, channel or farm. Notifications about no "
        "farm (operators' alerts) are listed to superusers only.",
    ),
    retrieve=extend_schema(
        summary="Get a notification",
        description="One notification with each delivery attempt and every status move, with "
        "who made it and why.",
    ),
    retry=extend_schema(summary="Retry a notification"),
    cancel=extend_schema(summary="Cancel a notification"),
)

CONTACTS = extend_schema_view(
    list=extend_schema(
        summary="List external contacts",
        description="People outside the product who are told by email or webhook, on the "
        "caller's farms; filter by farm or by whether they are active. Never a webhook's "
        "signing secret.",
    ),
    create=extend_schema(summary="Add an external contact"),
    retrieve=extend_schema(
        summary="Get an external contact",
        description="One contact: its farm, name, email, webhook URL and whether it is "
        "active. Its signing secret is shown only when issued.",
    ),
    partial_update=extend_schema(
        summary="Change an external contact",
        description="Name, email, webhook URL, or `is_active: true` to bring a deactivated "
        "contact back (admin role). A webhook URL that no webhook may go to is a 400.",
    ),
    destroy=extend_schema(summary="Deactivate an external contact"),
    rotate_secret=extend_schema(summary="Rotate a contact's webhook secret"),
)

CHANNEL_PREFERENCES = extend_schema_view(
    list=extend_schema(
        summary="List channel preferences",
        description="Which channels each of the caller's contacts is told on, with any "
        "opt-out the recipient made; filter by contact or channel. A channel without a row "
        "is on.",
    ),
    create=extend_schema(
        summary="Set a contact's channel preference",
        description="Turns one channel of one contact on or off (admin role): the row of "
        "(contact, channel) is made (201) or changed (200). Turning a channel on does not lift "
        "the recipient's own opt-out.",
    ),
    retrieve=extend_schema(
        summary="Get a channel preference",
        description="One contact's preference for one channel, with the recipient's opt-out "
        "if they made one.",
    ),
    partial_update=extend_schema(
        summary="Turn a channel preference on or off",
        description="Only `enabled` changes (admin role); the contact and channel stay.",
    ),
    destroy=extend_schema(
        summary="Reset a channel preference",
        description="The channel returns to its default (on). A row that holds the "
        "recipient's own opt-out stays: a 409.",
    ),
)
