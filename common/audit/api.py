"""The audit log over the API (``/api/v1/audit/``): an organisation's admins read the
configuration changes of their organisations, newest first, paged by cursor, filtered by the
changed row, the actor and a time range. Anyone else is refused (403); an entry of another
organisation does not exist for the caller (404)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from rest_framework.routers import SimpleRouter

from common.api import ScopedViewSet
from common.audit import schema_docs
from common.audit.models import AuditEntry
from common.audit.registry import followed_models
from common.audit.selectors import audit_entries_visible
from common.audit.serializers import AuditEntrySerializer
from common.filters import IdFilter
from common.pagination import NewestFirstCursor
from common.permissions import need_scope
from common.roles import Need
from common.tenancy import OrgScope


def _object_types() -> list[tuple[str, str]]:
    labels = sorted(model._meta.label_lower for model in followed_models())
    return [(label, label) for label in labels]


class AuditEntryFilter(django_filters.FilterSet):
    object_type = django_filters.ChoiceFilter(
        choices=_object_types,
        method="filter_object_type",
        help_text="The changed row's model, ``app_label.model`` (``devices.farm``)",
    )
    object_id = IdFilter(field_name="object_id", help_text="The changed row's id")
    actor = IdFilter(field_name="actor_id", help_text="The id of the user who made the change")
    since = django_filters.IsoDateTimeFilter(
        field_name="timestamp", lookup_expr="gte", help_text="Changes at or after this time"
    )
    until = django_filters.IsoDateTimeFilter(
        field_name="timestamp", lookup_expr="lt", help_text="Changes before this time"
    )

    class Meta:
        model = AuditEntry
        fields = ("object_type", "object_id", "actor", "since", "until")

    def filter_object_type(
        self, rows: QuerySet[AuditEntry], name: str, value: str
    ) -> QuerySet[AuditEntry]:
        app_label, _, model = value.partition(".")
        return rows.filter(content_type__app_label=app_label, content_type__model=model)


@schema_docs.AUDIT
class AuditEntryViewSet(ScopedViewSet):
    """The audit log is its organisation's admins' (``Need.CONFIGURE``) to read."""

    serializer_class = AuditEntrySerializer
    queryset = AuditEntry.objects.none()
    filterset_class = AuditEntryFilter
    pagination_class = NewestFirstCursor
    required_roles = {"list": Need.CONFIGURE, "retrieve": Need.CONFIGURE}
    organization_path = "organization_id"

    def get_queryset(self) -> QuerySet[AuditEntry]:
        return self.scoped(need_scope(self.request, Need.CONFIGURE))

    def scoped(self, scope: OrgScope) -> QuerySet[AuditEntry]:
        return audit_entries_visible(scope=scope)


router = SimpleRouter()
router.register("audit", AuditEntryViewSet, basename="audit")
urlpatterns = router.urls
