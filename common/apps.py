from django.apps import AppConfig


class CommonConfig(AppConfig):
    """Tenancy (organisations and their members) and the API's idempotency records: every
    app scopes its rows through them, so they sit below every app."""

    name = "common"
    verbose_name = "Organisations and API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/metrics`` reads the age of each retained table's oldest row at scrape time."""
        from common.retention import retention_gauges
        from config.metrics import metrics_gauges_register

        metrics_gauges_register("retention", retention_gauges)
