from __future__ import annotations

from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rollouts"
    verbose_name = "Fleet rollouts"

    def ready(self) -> None:
        """``/metrics`` reads rollouts and their targets by state at scrape time; ended
        rollouts are pruned past ``RETENTION_ROLLOUTS_DAYS`` (``rollouts.retention``)."""
        from config.metrics import metrics_gauges_register
        from rollouts.metrics import rollouts_gauges
        from rollouts.retention import rollouts_retention_register

        metrics_gauges_register("rollouts", rollouts_gauges)
        rollouts_retention_register()
