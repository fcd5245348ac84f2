"""Who may do what: the needs a route or an admin page can declare, the organisation roles
that meet each, and the staff groups that give the admin the same matrix.

A route declares one ``Need`` per action (``common.permissions.RoleMatrix`` reads it); a need
is met in an organisation by the roles of ``ROLES_MEETING``. Roles are not ranked by number:
a ``gateway`` is not a lesser viewer, it reads nothing and only posts telemetry."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from common.models import MemberRole


class Need(StrEnum):
    """What an action needs of the caller in the organisation it concerns."""

    ANYONE = "anyone"  # no login: the API's schema and its docs
    SIGNED_IN = "signed in"  # the caller's own rows (their token, their inbox)
    READ = "viewer"  # read the organisation's rows
    OPERATE = "operator"  # move devices and retry or cancel work
    CONFIGURE = "admin"  # change what the farm does and who is in it
    TELEMETRY = "gateway"  # post readings for the organisation's devices
    SUPERUSER = "superuser"  # nobody's organisation: the platform's own


ROLES_MEETING: dict[Need, frozenset[str]] = {
    Need.READ: frozenset({MemberRole.VIEWER, MemberRole.OPERATOR, MemberRole.ADMIN}),
    Need.OPERATE: frozenset({MemberRole.OPERATOR, MemberRole.ADMIN}),
    Need.CONFIGURE: frozenset({MemberRole.ADMIN}),
    Need.TELEMETRY: frozenset({MemberRole.GATEWAY, MemberRole.ADMIN}),
}
READ_ROLES = ROLES_MEETING[Need.READ]


def action_roles(
    *,
    read: tuple[str, ...] = ("list", "retrieve"),
    operate: tuple[str, ...] = (),
    configure: tuple[str, ...] = (),
) -> dict[str, Need]:
    """A viewset's ``required_roles``, written as the actions each need allows: the table
    reads as who may read, who may operate and who may configure."""
    needs = ((read, Need.READ), (operate, Need.OPERATE), (configure, Need.CONFIGURE))
    return {action: need for actions, need in needs for action in actions}


# The admin's staff groups, one per role (created by common's migration 0005): what each
# may do to the models of the product's apps. ``view`` lists and opens, ``operate`` runs the
# actions that move devices or work (``common.operate``), ``configure`` adds, changes and
# deletes. The organisation role still decides per row (``common.admin.scoping``).
PRODUCT_APPS = (
    "common",
    "devices",
    "automation",
    "scheduler",
    "events",
    "reminders",
    "notifications",
    "rollouts",
    "alarms",
    "audit",
)
STAFF_GROUPS: dict[str, tuple[Need, ...]] = {
    MemberRole.VIEWER: (Need.READ,),
    MemberRole.OPERATOR: (Need.READ, Need.OPERATE),
    MemberRole.ADMIN: (Need.READ, Need.OPERATE, Need.CONFIGURE),
}
OPERATE_PERMISSION = "common.operate"


def roles_meeting(need: Need) -> frozenset[str]:
    """The organisation roles that meet ``need`` (none for the needs no role meets)."""
    return ROLES_MEETING.get(need, frozenset())


def staff_groups_sync(apps: Any) -> None:
    """Create the staff groups of ``STAFF_GROUPS`` with their permissions over every model of
    the product's apps (``apps``: a migration's registry, or the live one); run by common's
    migrations, again whenever a later migration adds models."""
    from django.contrib.auth.management import create_permissions

    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, apps=apps, verbosity=0)
        config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    product = permission_model.objects.filter(content_type__app_label__in=PRODUCT_APPS)
    verbs = {Need.READ: ("view",), Need.CONFIGURE: ("add", "change", "delete")}
    for name, needs in STAFF_GROUPS.items():
        group, _ = group_model.objects.get_or_create(name=name)
        wanted = set()
        for need in needs:
            for verb in verbs.get(need, ()):
                wanted |= set(
                    product.filter(codename__startswith=f"{verb}_").values_list("pk", flat=True)
                )
        if Need.OPERATE in needs:
            label, codename = OPERATE_PERMISSION.split(".")
            wanted |= set(
                product.filter(content_type__app_label=label, codename=codename).values_list(
                    "pk", flat=True
                )
            )
        group.permissions.set(sorted(wanted))
