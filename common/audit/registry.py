"""The configuration models the audit log follows, each with how its rows reach their
organisation and which of its fields are not configuration. Models are named by label (this
app sits below the apps that own them). Telemetry, endpoint events, commands, due work and
notifications are not here: they are the hot path's or have their own trail.

Only concrete fields are followed (never reverse relations or many-to-many links), minus the
timestamps a save sets by itself and the columns the system moves at run time (a device's
last reading, a rollout's rate). A field whose name says it holds a secret is masked whole."""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from auditlog.registry import auditlog
from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import DateTimeField, Model

MASK = "********"
# Names of fields whose values are secret material: a secret, a password, a token's key or
# digest, a salt or key id that locates a secret.
SECRET_NAME = re.compile(r"secret|password|passwd|token|digest|salt|credential|private")


@dataclass(frozen=True)
class Followed:
    """``label``'s rows reach their organisation through ``organization`` (attribute paths
    tried in order; none: the platform's own row); ``runtime`` lists the fields the system
    moves by itself, which are not configuration."""

    label: str
    organization: tuple[str, ...]
    runtime: tuple[str, ...] = ()
    secret: tuple[str, ...] = ()  # masked though their names do not say so


_FARM_ORG = ("farm.organization_id",)
_RULE_ORG = ("rule.farm.organization_id",)
# A rollout's counters and lease move on every tick of its driver.
_ROLLOUT_RUNTIME = (
    "canary_left",
    "rate_per_minute",
    "rate_budget",
    "recent_starts",
    "ramp_next_applied",
    "waves",
    "ramping",
    "targets_through_endpoint",
    "tripped",
    "lease_expires_at",
    "version",
    "ticked_at",
)
CONFIGURATION: tuple[Followed, ...] = (
    Followed("common.Organization", ("id",)),
    Followed("common.OrganizationMember", ("organization_id",)),
    Followed("notifications.Membership", ("organization_id",)),
    Followed("devices.Farm", ("organization_id",)),
    Followed("devices.DeviceProfile", ("organization_id",)),
    Followed("devices.DeviceProfileEndpoint", ("profile.organization_id",)),
    Followed("devices.Device", _FARM_ORG, ("last_seen_at", "online", "offline_due_at")),
    Followed(
        "devices.DeviceInstanceEndpoint",
        ("device.farm.organization_id",),
        ("last_value", "last_value_at"),
    ),
    Followed("automation.AutomationRule", _FARM_ORG),
    Followed("automation.AutomationRuleCondition", _RULE_ORG),
    Followed("automation.AutomationRuleAction", _RULE_ORG),
    Followed("automation.AutomationRuleSchedule", _RULE_ORG),
    Followed(
        "automation.EndpointManualHold", ("endpoint.device.farm.organization_id",), ("version",)
    ),
    Followed("notifications.ExternalContact", _FARM_ORG),
    Followed("notifications.ChannelPreference", ("contact.farm.organization_id",)),
    Followed("notifications.NotificationProfile", _FARM_ORG),
    Followed("alarms.AlarmPolicy", _FARM_ORG),
    Followed("reminders.ReminderSetting", ("organization_id", "farm.organization_id")),
    Followed("reminders.ReportSubscription", _FARM_ORG),
    Followed("rollouts.Rollout", ("organization_id",), _ROLLOUT_RUNTIME),
    Followed("accounts.ApiToken", (), ("last_used_at",), secret=("prefix",)),
)
_ORGANIZATION_PATHS: dict[type[Model], tuple[str, ...]] = {}


def _automatic(field: Any) -> bool:
    return isinstance(field, DateTimeField) and bool(field.auto_now)


def configuration_register() -> None:
    """Registers every model of ``CONFIGURATION`` with django-auditlog (idempotent)."""
    for followed in CONFIGURATION:
        model = apps.get_model(followed.label)
        fields = [
            f.name
            for f in model._meta.concrete_fields
            if f.name not in followed.runtime and f.name != "updated_at" and not _automatic(f)
        ]
        auditlog.register(
            model,
            include_fields=fields,
            mask_fields=[n for n in fields if SECRET_NAME.search(n) or n in followed.secret],
            mask_callable="common.audit.registry.masked",
        )
        _ORGANIZATION_PATHS[model] = followed.organization


def masked(value: str) -> str:
    """The whole value hidden (django-auditlog's own mask keeps half of it); an empty value
    stays empty, so an entry still shows a secret being set or cleared."""
    return MASK if value not in ("", "None") else value


def followed_models() -> list[type[Model]]:
    return list(_ORGANIZATION_PATHS)


def organization_of(instance: Model) -> int | None:
    """The organisation of a followed row, read from the row (and its parents) as it is at
    the moment of the entry; None for a row of no organisation."""
    for path in _ORGANIZATION_PATHS.get(type(instance), ()):
        try:
            found = attrgetter(path)(instance)
        except (AttributeError, ObjectDoesNotExist):
            continue
        if found is not None:
            return int(found)
    return None
