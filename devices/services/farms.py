"""Farms: created in an organisation, renamed, moved to another time zone, archived. A name
is unique in its organisation (the farm_name_per_org constraint absorbs a concurrent
duplicate) and a zone is one ``zoneinfo`` can load. Archiving is once: the first archive's
time and actor stay."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.audit.writes import audited_update
from common.models import Organization
from common.validators import validate_time_zone
from devices.models import Farm
from devices.services.provisioning import ProvisioningRefused

_NAME_TAKEN = "a farm of this name exists in this organisation"


def _zone_checked(time_zone: str) -> None:
    try:
        validate_time_zone(time_zone)
    except ValidationError as exc:
        raise ProvisioningRefused("time_zone", exc.messages[0]) from None


def farm_create(*, organization: Organization, name: str, time_zone: str = "UTC") -> Farm:
    _zone_checked(time_zone)
    try:
        with transaction.atomic():
            return Farm.objects.create(organization=organization, name=name, time_zone=time_zone)
    except IntegrityError:
        raise ProvisioningRefused("name", _NAME_TAKEN) from None


def farm_update(*, farm: Farm, name: str | None = None, time_zone: str | None = None) -> Farm:
    """Rename the farm or change its zone (reminders and reports follow the new zone)."""
    changes: dict[str, str] = {}
    if name is not None:
        changes["name"] = name
    if time_zone is not None:
        _zone_checked(time_zone)
        changes["time_zone"] = time_zone
    if not changes:
        return farm
    try:
        with transaction.atomic():
            audited_update(Farm.objects.filter(pk=farm.pk), **changes)
    except IntegrityError:
        raise ProvisioningRefused("name", _NAME_TAKEN) from None
    for field, value in changes.items():
        setattr(farm, field, value)
    return farm


def farm_archive(*, farm_id: int, actor: str, now: datetime | None = None) -> bool:
    """Archive the farm (compare-and-set on "not archived yet"): it leaves the farm list and
    its rules stop deciding; devices, readings and history are kept. False when it was
    archived already (by this call's retry or anyone else): nothing changes then."""
    archived = audited_update(
        Farm.objects.filter(pk=farm_id, archived_at__isnull=True),
        archived_at=now or timezone.now(),
        archived_by=actor[:150],
    )
    return archived == 1
