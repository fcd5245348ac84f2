"""Fixtures of the tenancy tests."""

from __future__ import annotations

import pytest

from common.models import Organization
from devices.models import DeviceProfile, Farm
from tests.conftest import Tenant

BETA_ORG, BETA_FARM, BETA_PROFILE = "Beta Orchards Ltd", "Beta North Field", "Beta Relay 9"


@pytest.fixture
def named(tenants: tuple[Tenant, Tenant]) -> tuple[Tenant, Tenant]:
    """The tenants with names that cannot appear on a page by accident."""
    alpha, beta = tenants
    Organization.objects.filter(pk=beta.kit.farm.organization_id).update(name=BETA_ORG)
    Farm.objects.filter(pk=beta.kit.farm.pk).update(name=BETA_FARM)
    DeviceProfile.objects.filter(pk=beta.kit.actuator.profile_id).update(name=BETA_PROFILE)
    return alpha, beta
