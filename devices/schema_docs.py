"""What the API docs say of each operation of the devices part (``devices.api``): a one-line
summary and a description of its own. Kept apart from the views so that each view reads as
code; a view names its entry here (``@schema_docs.FARMS``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view

FARMS = extend_schema_view(
    list=extend_schema(
        summary="List farms",
        description="The farms of the caller's organisations in use, by id; `archived=true` "
        "lists the archived ones instead.",
    ),
    create=extend_schema(
        summary="Create a farm",
        description="A farm in one of the caller's organisations (admin role there) and its "
        "IANA time zone, in which its schedules, reminders and reports run. A name is unique "
        "within the organisation.",
    ),
    retrieve=extend_schema(
        summary="Get a farm",
        description="One farm, archived or not. Another organisation's farm is a 404.",
    ),
    partial_update=extend_schema(
        summary="Change a farm",
        description="Rename the farm or move it to another time zone (admin role); only the "
        "fields named change. Archiving is `POST …/archive/`.",
    ),
    archive=extend_schema(summary="Archive a farm"),
)

DEVICES = extend_schema_view(
    list=extend_schema(
        summary="List devices",
        description="The devices on the caller's farms, by id; filter by farm or status "
        "(active, maintenance, retired).",
    ),
    create=extend_schema(summary="Provision a device"),
    retrieve=extend_schema(
        summary="Get a device",
        description="One device: its farm, profile, serial number, status and when it was "
        "last heard from. Never its MQTT password.",
    ),
    partial_update=extend_schema(
        summary="Rename a device",
        description="Only the device's name changes here (admin role); its status moves "
        "through `POST …/status/` and its login through `POST …/credentials/`.",
    ),
    credentials=extend_schema(summary="Rotate a device's MQTT password"),
    change_status=extend_schema(summary="Change a device's status"),
)

PROFILES = extend_schema_view(
    list=extend_schema(
        summary="List device profiles",
        description="The caller's organisations' profiles and the global ones (no "
        "organisation), each with its endpoint catalogue.",
    ),
    create=extend_schema(
        summary="Create a device profile",
        description="A profile and its endpoint catalogue: each entry's key, data type "
        "(number, bool or enum), whether it can be set and how (RPC method and parameter), "
        "and its bounds or allowed values. An organisation's admin creates its profiles; a "
        "global one (no organisation) needs a superuser.",
    ),
    retrieve=extend_schema(
        summary="Get a device profile",
        description="One profile with its endpoint catalogue. Another organisation's profile "
        "is a 404, so a name taken elsewhere never shows.",
    ),
    partial_update=extend_schema(
        summary="Rename a device profile",
        description="Only the profile's name changes (its organisation's admin; a superuser "
        "for a global profile). Entries are added through `POST …/endpoints/`.",
    ),
    endpoints_add=extend_schema(summary="Add endpoints to a device profile"),
)

ENDPOINTS = extend_schema_view(
    list=extend_schema(
        summary="List device endpoints",
        description="The endpoints of the caller's devices, each with its latest reading and "
        "any manual hold; `device` narrows the list to one device.",
    ),
    retrieve=extend_schema(
        summary="Get a device endpoint",
        description="One endpoint of a device: its catalogue entry, whether it is enabled, "
        "its RPC overrides, its latest reading and until when a manual command holds it.",
    ),
    partial_update=extend_schema(
        summary="Configure a device endpoint",
        description="Enable or disable the endpoint, or override its RPC method or parameter "
        "key for this device (admin role).",
    ),
    series=extend_schema(summary="Get an endpoint's readings over time"),
)
