from django.apps import AppConfig


class RemindersConfig(AppConfig):
    name = "reminders"
    default_auto_field = "django.db.models.BigAutoField"
