"""Tenancy and API bookkeeping shared by every app (docs/spec.md §2). The tables were
created by the devices app and keep its names."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Organization(models.Model):
    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "devices_organization"
        # The admin's staff groups (``common.roles.STAFF_GROUPS``): operating is no model's
        # change permission, so it is a permission of its own.
        permissions = [("operate", "Can operate devices: manual commands, holds, retries")]

    def __str__(self) -> str:
        return self.name


class MemberRole(models.TextChoices):
    """What a member may do in the organisation (``common.roles`` maps each to what it may
    do): ``viewer`` reads; ``operator`` also operates the devices (manual commands, holds,
    retries, cancels, user messages); ``admin`` also configures (rules, reminders, contacts,
    farms, profiles, devices, members); ``gateway`` is a service account that only posts
    telemetry for the organisation's devices."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"
    GATEWAY = "gateway"


class OrganizationMember(models.Model):
    """A user who works for an organisation (support staff, integrators): the admin and the API
    show a non-superuser only the rows of the organisations they belong to."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="organization_memberships"
    )
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=16, choices=MemberRole.choices, default=MemberRole.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "devices_organizationmember"
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="member_once_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.organization}"


class ApiIdempotencyRecord(models.Model):
    """The first response to a POST carrying an ``Idempotency-Key``: a client retrying the same
    key (a timeout, a lost reply) gets that response again instead of a second create. The
    request's hash tells a retry from another request under a reused key; a record counts for
    ``API_IDEMPOTENCY_TTL_S`` and is pruned after."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    key = models.CharField(max_length=200)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=300)
    # sha256 of method, path and canonical body; empty on records written before it was kept.
    request_hash = models.CharField(max_length=64, blank=True, default="")
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "devices_apiidempotencyrecord"
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} · key {self.key} → {self.status_code}"


class ConfigVersion(models.Model):
    """One row whose ``version`` every write of a configuration table moves, in the writing
    transaction (``common.config_version``): per-process caches of configuration compare it
    with the version they were built at. Written by database triggers only."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "configuration version"

    def __str__(self) -> str:
        return f"configuration version {self.version}"
