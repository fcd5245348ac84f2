"""factory_boy factories for the automation app's models."""

from __future__ import annotations

import factory

from automation.models import AutomationRule, Operator


class RuleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AutomationRule

    name = factory.Sequence(lambda n: f"Rule {n}")
    operator = Operator.GT
    threshold_value = 30
    target_value = True
