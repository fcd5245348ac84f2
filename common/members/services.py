"""Every write of organisations and memberships. Duplicates are absorbed by the unique keys
(an organisation's name, one membership per user and organisation) and reported as the field
they concern."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from common.models import MemberRole, Organization, OrganizationMember


class MembershipRefused(Exception):
    """A membership change that would break an invariant; ``field`` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def organization_create(*, name: str) -> Organization:
    try:
        with transaction.atomic():
            return Organization.objects.create(name=name)
    except IntegrityError:
        raise MembershipRefused("name", "an organisation of this name exists") from None


def member_add(*, organization: Organization, user: User, role: str) -> OrganizationMember:
    try:
        with transaction.atomic():
            return OrganizationMember.objects.create(
                organization=organization, user=user, role=role
            )
    except IntegrityError:
        raise MembershipRefused("user", "is already a member of this organisation") from None


def _keeps_an_admin(member: OrganizationMember) -> bool:
    """False when ``member`` is the organisation's only admin. Locks the organisation's admin
    rows (in the caller's transaction), so two admins removing each other cannot both win."""
    if member.role != MemberRole.ADMIN:
        return True
    admins = OrganizationMember.objects.select_for_update().filter(
        organization_id=member.organization_id, role=MemberRole.ADMIN
    )
    return len(list(admins.values_list("pk", flat=True))) > 1


def member_role_change(
    *, member: OrganizationMember, role: str, by_superuser: bool
) -> OrganizationMember:
    """Set the member's role; an admin may not demote the organisation's last admin."""
    with transaction.atomic():
        member = OrganizationMember.objects.select_for_update().get(pk=member.pk)
        if role != MemberRole.ADMIN and not by_superuser and not _keeps_an_admin(member):
            raise MembershipRefused("role", "the organisation's last admin stays an admin")
        member.role = role
        member.save(update_fields=["role"])
    return member


def member_remove(*, member: OrganizationMember, by_superuser: bool) -> None:
    """Remove the membership; an admin may not remove the organisation's last admin."""
    with transaction.atomic():
        member = OrganizationMember.objects.select_for_update().get(pk=member.pk)
        if not by_superuser and not _keeps_an_admin(member):
            raise MembershipRefused("user", "the organisation's last admin cannot be removed")
        member.delete()
