"""factory_boy factories for the scheduler app's models."""

from __future__ import annotations

import factory
from django.utils import timezone

from scheduler.models import AutomationType, DueWork, TriggerType


class DueWorkFactory(factory.django.DjangoModelFactory):
    """A pending row of due work, due when it is written."""

    class Meta:
        model = DueWork

    automation_type = AutomationType.REPORT_SUBSCRIPTION
    trigger_type = TriggerType.MANUAL_RUN
    scheduler_key = factory.Sequence(lambda n: f"report-subscription:factory:manual:{n}")
    scheduled_on = factory.SelfAttribute("created_on")
    input_hash = "0" * 64
    created_on = factory.LazyFunction(timezone.now)
    updated_on = factory.SelfAttribute("created_on")
