from __future__ import annotations

from django.apps import AppConfig


class AlarmsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "alarms"
    verbose_name = "Alarms"

    def ready(self) -> None:
        """``/metrics`` reads open alarms by severity at scrape time; cleared alarms are pruned
        past ``RETENTION_ALARMS_DAYS`` (``alarms.retention``). Event handlers are loaded by the
        events app."""
        from alarms.metrics import alarms_gauges
        from alarms.retention import alarms_retention_register
        from config.metrics import metrics_gauges_register

        metrics_gauges_register("alarms", alarms_gauges)
        alarms_retention_register()
