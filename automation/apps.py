from django.apps import AppConfig


class AutomationConfig(AppConfig):
    name = "automation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Counting hooks and scrape-time gauges for ``/metrics``, and the handler of rule
        schedules' occurrences, in every process."""
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
