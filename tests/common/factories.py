"""factory_boy factories for the common app's tenancy models."""

from __future__ import annotations

import factory

from common.models import Organization


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")
