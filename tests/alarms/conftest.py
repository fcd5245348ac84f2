"""Alarm fixtures: a farm whose people hold every role that alarms reach (an owner on the
farm, a manager on its organisation, an operator and a viewer on the farm) and an external
contact with an email address and a signed webhook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser

from devices.models import Farm
from notifications.models import ExternalContact, MembershipRole
from notifications.services.contacts import external_contact_create
from tests.devices.factories import FarmFactory
from tests.notifications.factories import MembershipFactory


@dataclass
class People:
    farm: Farm
    owner: AbstractUser
    manager: AbstractUser
    operator: AbstractUser
    viewer: AbstractUser
    contact: ExternalContact

    def user_keys(self, *users: AbstractUser) -> set[str]:
        return {f"user:{u.pk}" for u in users}


def _user(name: str) -> AbstractUser:
    return get_user_model().objects.create_user(
        username=name, password="pw", email=f"{name}@example.test"
    )


@pytest.fixture
def people(db: None, settings: Any) -> People:
    settings.WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    farm = FarmFactory()
    owner, manager, operator, viewer = (_user(n) for n in ("owner", "manager", "op", "viewer"))
    MembershipFactory(user=owner, farm=farm, role=MembershipRole.OWNER)
    MembershipFactory(user=manager, organization=farm.organization, role=MembershipRole.MANAGER)
    MembershipFactory(user=operator, farm=farm, role=MembershipRole.OPERATOR)
    MembershipFactory(user=viewer, farm=farm, role=MembershipRole.VIEWER)
    contact, _ = external_contact_create(
        farm_id=farm.pk,
        name="Integrator",
        email="ops@integrator.test",
        webhook_url="http://127.0.0.1:9/alarms",
        with_webhook_secret=True,
    )
    return People(farm, owner, manager, operator, viewer, contact)
