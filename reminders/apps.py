from django.apps import AppConfig


class RemindersConfig(AppConfig):
    name = "reminders"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register every source type's providers and the scheduler handlers in every process
        (web, workers, commands). Event handlers are loaded by the events app."""
        from reminders.providers import providers_load
        from reminders.scheduler_handlers import scheduler_handlers_register

        providers_load()
        scheduler_handlers_register()
        _config_tables_watch()
        _metric_reader_register()


def _config_tables_watch() -> None:
    """A threshold reminder's metric source is configuration (``common.config_version``):
    ingest keeps the readings of its endpoint for evaluation while it is active
    (``automation.services.rule_cache.endpoints_read``)."""
    from common.config_version import config_tables_watch
    from reminders.models import EndpointMetricSource

    config_tables_watch(EndpointMetricSource)


def _metric_reader_register() -> None:
    """Tell ingest which endpoints' readings a threshold reminder reads as they come
    (``automation.services.rule_cache.endpoints_read``), and the spine which readings to hand
    on to threshold reminders."""
    from automation.services.rule_cache import metric_readers_register
    from reminders.selectors import metric_endpoints_active

    metric_readers_register(metric_endpoints_active)
