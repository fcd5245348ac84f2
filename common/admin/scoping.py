"""Organisation scoping for every support admin, for a staff user who is not a superuser: a
list shows only rows of the user's organisations (``org_path``); every foreign-key choice in a
form or an inline and every related list filter offers only what the user may see (the related
model's own admin, or the path declared with ``common.tenancy.org_path_register``; anything
else offers nothing); and a save re-checks every reference and that the saved row is still
the user's, refusing a crafted POST with a 403 that rolls the whole save back. Pages no
organisation applies to are for superusers only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.options import BaseModelAdmin
from django.contrib.admin.sites import AdminSite
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.core.exceptions import PermissionDenied
from django.db.models import ForeignKey, Model, Q, QuerySet
from django.http import HttpRequest

from common.permissions import need_scope
from common.roles import OPERATE_PERMISSION, Need
from common.tenancy import org_path_of, organization_scope, scope_filter


def is_superuser(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and getattr(user, "is_superuser", False))


def related_rows(site: AdminSite, request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
    """The rows of ``model`` the user may pick or filter by: all for a superuser; else what
    the model's org-scoped admin lists, or the rows of the user's organisations through the
    model's registered path; else none (a new kind of reference is closed until declared)."""
    rows = model._default_manager.all()
    scope = organization_scope(request.user)
    if scope is None:
        return rows
    try:
        model_admin = site.get_model_admin(model)
    except NotRegistered:
        model_admin = None
    if isinstance(model_admin, OrgScopedAdmin):
        return model_admin.get_queryset(request)
    path = org_path_of(model)
    return rows.none() if path is None else scope_filter(rows, scope, path).distinct()


class _ScopedRawIdWidget(ForeignKeyRawIdWidget):
    """Names the chosen row only when the user may see it (a crafted id shows nothing)."""

    def __init__(self, *args: Any, allowed: QuerySet[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed = allowed

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        key = self.rel.get_related_field().name
        try:
            visible = self.allowed.filter(**{key: value}).exists()
        except (ValueError, TypeError):
            visible = False
        return super().label_and_url_for_value(value) if visible else ("", "")


class OrgScopedChoices(BaseModelAdmin):  # type: ignore[type-arg]
    """Foreign-key and many-to-many choices of a form (admin or inline) limited to
    ``related_rows``; the form then refuses any other id as "not a valid choice"."""

    admin_site: AdminSite

    def get_field_queryset(self, db: Any, db_field: Any, request: HttpRequest) -> QuerySet[Any]:
        model = db_field.remote_field.model
        ordered = super().get_field_queryset(db, db_field, request)
        rows = ordered if ordered is not None else model._default_manager.using(db).all()
        if organization_scope(request.user) is None:
            return rows
        return rows.filter(pk__in=related_rows(self.admin_site, request, model).values("pk"))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        widget = getattr(field, "widget", None)
        allowed = getattr(field, "queryset", None)
        if field is not None and allowed is not None and isinstance(widget, ForeignKeyRawIdWidget):
            field.widget = _ScopedRawIdWidget(
                widget.rel, widget.admin_site, widget.attrs, widget.db, allowed=allowed
            )
        return field


class ScopedRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A related list filter offering only what the user may see."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        allowed = related_rows(model_admin.admin_site, request, field.related_model)
        return field.get_choices(
            include_blank=False,
            ordering=self.field_admin_ordering(field, request, model_admin),
            limit_choices_to=Q(pk__in=allowed.values("pk")),
        )


class ScopedRelatedOnlyFieldListFilter(admin.RelatedOnlyFieldListFilter):
    """``RelatedOnlyFieldListFilter`` (what the listed rows point at) within what the user
    may see."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        allowed = related_rows(model_admin.admin_site, request, field.related_model)
        used = model_admin.get_queryset(request).values(f"{self.field_path}__pk")
        return field.get_choices(
            include_blank=False,
            ordering=self.field_admin_ordering(field, request, model_admin),
            limit_choices_to=Q(pk__in=used) & Q(pk__in=allowed.values("pk")),
        )


def _references(obj: Model) -> list[tuple[ForeignKey[Any, Any], Any]]:
    """(foreign key, value) for every reference ``obj`` holds (one-to-one keys included)."""
    return [
        (field, getattr(obj, field.attname))
        for field in obj._meta.concrete_fields
        if isinstance(field, ForeignKey) and getattr(obj, field.attname) is not None
    ]


class OrgScopedAdmin(OrgScopedChoices, admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows reach their organisation through ``org_path``; without one (tables that carry no
    organisation yet) only superusers see rows. Choices, filters and saves are scoped (see the
    module docstring).

    The API's role matrix holds here too (``common.roles``): a staff group's permissions say
    which pages and buttons a user has, the user's role in the row's organisation whether
    they may use them there. Adding, changing and deleting configure (``admin``); actions
    operate (``operator``, the ``common.operate`` permission)."""

    org_path: str | None = None
    write_need = Need.CONFIGURE

    def rows_meeting(self, request: HttpRequest, need: Need, rows: QuerySet[Any]) -> QuerySet[Any]:
        """The rows of ``rows`` in organisations where the user's role meets ``need``."""
        scope = need_scope(request, need)
        if scope is None:
            return rows
        if self.org_path is None:
            return rows.none()
        return scope_filter(rows, scope, self.org_path)

    def _role_allows(self, request: HttpRequest, need: Need, obj: Any) -> bool:
        if is_superuser(request):
            return True
        if obj is None:  # somewhere: the page and its buttons
            return bool(need_scope(request, need))
        rows = self.model._default_manager.filter(pk=obj.pk)
        return self.rows_meeting(request, need, rows).exists()

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        allowed = super().has_add_permission(request, *args)
        return allowed and self._role_allows(request, self.write_need, None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)
        return allowed and self._role_allows(request, self.write_need, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and self._role_allows(request, self.write_need, obj)

    def has_operate_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Actions that move devices or work: retry, mark failed, cancel, hold, release."""
        if is_superuser(request):
            return True
        if not request.user.has_perm(OPERATE_PERMISSION):
            return False
        return self._role_allows(request, Need.OPERATE, obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        scope = organization_scope(request.user)
        if scope is None:
            return rows
        if self.org_path is None:
            return rows.none()
        return scope_filter(rows, scope, self.org_path)

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = super().get_list_filter(request)
        if organization_scope(request.user) is None:
            return filters
        return tuple(self._scoped_filter(entry) for entry in filters)

    def _scoped_filter(self, entry: Any) -> Any:
        """A relation's filter becomes its scoped form; other filters list no other rows."""
        if isinstance(entry, str):
            path, kind = entry, None
        elif isinstance(entry, tuple):
            path, kind = entry
        else:
            return entry  # a SimpleListFilter: its own lookups
        if not get_fields_from_path(self.model, path)[-1].is_relation:
            return entry
        if isinstance(kind, type) and issubclass(kind, admin.RelatedOnlyFieldListFilter):
            return (path, ScopedRelatedOnlyFieldListFilter)
        return (path, ScopedRelatedFieldListFilter)

    def refuse_out_of_scope(self, request: HttpRequest, obj: Model) -> None:
        """403 (the admin's transaction rolls back) when ``obj`` points at a row the user may
        not see: what a crafted POST past the form's choices would do."""
        if organization_scope(request.user) is None:
            return
        for field, value in _references(obj):
            allowed = related_rows(self.admin_site, request, field.remote_field.model)
            if not allowed.filter(**{field.target_field.attname: value}).exists():
                raise PermissionDenied(f"{field.name}: not in your organisations")

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        obj = super().save_form(request, form, change)
        self.refuse_out_of_scope(request, obj)
        return obj

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        super().save_formset(request, form, formset, change)
        for obj in [*formset.new_objects, *(o for o, _ in formset.changed_objects)]:
            self.refuse_out_of_scope(request, obj)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """After every write of the save: the row must still be one the user may see."""
        super().save_related(request, form, formsets, change)
        if organization_scope(request.user) is None:
            return
        rows = self.get_queryset(request).filter(pk=form.instance.pk)
        if not self.rows_meeting(request, self.write_need, rows).exists():
            raise PermissionDenied("the row would leave the organisations you administer")


class OrgScopedTabularInline(OrgScopedChoices, admin.TabularInline):  # type: ignore[type-arg]
    """An inline of an org-scoped admin: its choices are scoped too (its rows are saved, and
    re-checked, by the parent's ``save_formset``)."""


class SuperuserOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Pages no organisation scope applies to (users, groups, the beat schedule, API tokens):
    superusers only, whatever permissions a staff user holds."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


def admin_superuser_only(*models: type[Model], site: AdminSite = admin.site) -> None:
    """Register each model's current admin again with ``SuperuserOnlyAdmin`` in front."""
    for model in models:
        current = type(site.get_model_admin(model))
        site.unregister(model)
        name = f"SuperuserOnly{current.__name__}"
        site.register(model, type(name, (SuperuserOnlyAdmin, current), {}))


class ReadOnlyAdmin(OrgScopedAdmin):
    """Ledger rows: listed, filtered and opened, changed only through actions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # An object page never saves fields; rows move only through actions (operate).
        return obj is None and super().has_change_permission(request)
