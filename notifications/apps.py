from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the built-in channels in every process (web, worker, commands), and what
        the app keeps and for how long (``notifications.retention``)."""
        import notifications.channels  # noqa: F401
        from notifications.retention import notifications_retention_register

        notifications_retention_register()
