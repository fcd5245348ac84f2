"""factory_boy factories for the common app's tenancy models."""

from __future__ import annotations

import factory

from common.models import Organization, OrganizationMember


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")


class OrganizationMemberFactory(factory.django.DjangoModelFactory):
    """A user who works for an organisation; the user is always given."""

    class Meta:
        model = OrganizationMember

    organization = factory.SubFactory(OrganizationFactory)
