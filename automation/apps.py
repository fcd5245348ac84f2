from django.apps import AppConfig


class AutomationConfig(AppConfig):
    name = "automation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Counting hooks and scrape-time gauges for ``/metrics``, the handler of rule
        schedules' occurrences, in every process; which of its tables are configuration."""
        from django.db.models.signals import post_save

        from automation.metrics import execution_core_gauges
        from automation.models import CommandTransition
        from config.metrics import metrics_gauges_register, metrics_transition_saved

        post_save.connect(
            metrics_transition_saved,
            sender=CommandTransition,
            weak=False,
            dispatch_uid="farm-metrics-transition",
        )
        metrics_gauges_register("automation", execution_core_gauges)
        from automation.retention import automation_retention_register
        from automation.scheduler_handlers import scheduler_handlers_register

        scheduler_handlers_register()
        automation_retention_register()
        _config_tables_watch()


def _config_tables_watch() -> None:
    """Rules with their conditions, actions and schedules are configuration
    (``common.config_version``): the evaluation's rule cache follows their version."""
    from automation.models import (
        AutomationRule,
        AutomationRuleAction,
        AutomationRuleCondition,
        AutomationRuleSchedule,
    )
    from common.config_version import config_tables_watch

    for model in (
        AutomationRule,
        AutomationRuleCondition,
        AutomationRuleAction,
        AutomationRuleSchedule,
    ):
        config_tables_watch(model)
