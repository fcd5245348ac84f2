from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/metrics`` reads the due-work backlog through this app's gauges."""
        from config.metrics import metrics_gauges_register
        from scheduler.metrics import scheduler_gauges

        metrics_gauges_register("scheduler", scheduler_gauges)
