from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the built-in channels in every process (web, worker, commands)."""
        import notifications.channels  # noqa: F401
