from django.apps import AppConfig


class CommonConfig(AppConfig):
    """Tenancy (organisations and their members) and the API's idempotency records: every
    app scopes its rows through them, so they sit below every app."""

    name = "common"
    verbose_name = "Organisations and API"
    default_auto_field = "django.db.models.BigAutoField"
