"""factory_boy factories for the notifications app's models: who may be told and how."""

from __future__ import annotations

import factory

from notifications.models import (
    ChannelPreference,
    ExternalContact,
    Membership,
    MembershipRole,
    NotificationProfile,
)
from notifications.states import Channel
from tests.devices.factories import FarmFactory


class MembershipFactory(factory.django.DjangoModelFactory):
    """A user's role on a farm, or on an organisation when ``organization`` is given (never
    both); the user is always given."""

    class Meta:
        model = Membership

    organization = None
    farm = factory.Maybe(
        "organization", yes_declaration=None, no_declaration=factory.SubFactory(FarmFactory)
    )
    role = MembershipRole.MEMBER


class ExternalContactFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ExternalContact

    farm = factory.SubFactory(FarmFactory)
    name = factory.Sequence(lambda n: f"Contact {n}")


class ChannelPreferenceFactory(factory.django.DjangoModelFactory):
    """One recipient's choice for one channel; give ``user`` or ``contact``."""

    class Meta:
        model = ChannelPreference

    channel = Channel.EMAIL


class NotificationProfileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = NotificationProfile

    farm = factory.SubFactory(FarmFactory)
