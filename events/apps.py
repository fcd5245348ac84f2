from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EventsConfig(AppConfig):
    name = "events"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Fill the registry in every process (web, worker, commands): the product's event
        types, then each app's ``event_handlers`` module, where handlers register."""
        import events.event_types  # noqa: F401
        from config.metrics import metrics_gauges_register
        from events.retention import events_retention_register
        from events.selectors import dead_letter_gauges

        autodiscover_modules("event_handlers")
        metrics_gauges_register("events", dead_letter_gauges)
        events_retention_register()
