"""What the API docs say of each operation of the shared part of the API (``common.urls``'
root, ``common.accounts.api``, ``common.members.api``): a one-line summary and a description
of its own. Kept apart from the views so that each view reads as code; a view names its
entry here (``@schema_docs.MEMBERS``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view

API_ROOT = extend_schema_view(get=extend_schema(summary="List the API's resources"))

API_TOKEN = extend_schema_view(
    get=extend_schema(
        summary="Get my API token's details",
        description="When the caller's token was issued, last used and expires, and the "
        "first characters of its key to recognise it by; never the key. A caller without a "
        "token gets a 404.",
    ),
)

API_TOKEN_ROTATE = extend_schema_view(
    post=extend_schema(
        summary="Issue me a new API token",
        description="A new key for the caller, in this answer only (`Cache-Control: "
        "no-store`): only its digest is kept. The previous key, if any, stops working at "
        "once. Send it as `Authorization: Token <key>`.",
    ),
)

ORGANIZATIONS = extend_schema_view(
    list=extend_schema(
        summary="List my organisations",
        description="The organisations the caller is a member of (every one for a "
        "superuser), paged.",
    ),
    create=extend_schema(
        summary="Create an organisation",
        description="A new organisation with no members yet (superusers only); its name is unique.",
    ),
    retrieve=extend_schema(
        summary="Get an organisation",
        description="One of the caller's organisations. Any other is a 404.",
    ),
)

MEMBERS = extend_schema_view(
    list=extend_schema(
        summary="List members",
        description="The members of the caller's organisations with their roles (viewer, "
        "operator, admin, gateway); `organization` narrows the list to one.",
    ),
    create=extend_schema(
        summary="Add a member",
        description="An existing user joins one of the caller's organisations with a role "
        "(admin role there). A user who is a member already is a 400 on `user`.",
    ),
    retrieve=extend_schema(
        summary="Get a member",
        description="One membership: the user, the organisation and the role.",
    ),
    partial_update=extend_schema(
        summary="Change a member's role",
        description="Only the role changes (admin role); the organisation's last admin stays "
        "an admin unless a superuser asks.",
    ),
    destroy=extend_schema(
        summary="Remove a member",
        description="The user leaves the organisation and loses access to its rows at once "
        "(admin role). The organisation's last admin is not removed (400) unless a superuser "
        "asks.",
    ),
)
