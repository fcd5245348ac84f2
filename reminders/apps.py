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
