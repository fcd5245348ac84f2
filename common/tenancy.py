"""Who sees what: a user's organisations, and a filter that keeps a query inside them. The
admin and the API of every app go through these, so another organisation's rows are simply
not there (a 404, not a 403)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Model, QuerySet

from common.models import OrganizationMember
from common.roles import READ_ROLES

# ``None`` means "every organisation" (a superuser); otherwise the ids the user belongs to.
OrgScope = frozenset[int] | None

# How rows of a model reach their organisation, for models no org-scoped admin lists (an
# endpoint is picked in a rule's form, never listed): "app_label.model" -> lookup path.
_ORG_PATHS: dict[str, str] = {}
USER_ORG_PATH = "organization_memberships__organization_id"


def organization_scope(
    user: AbstractBaseUser | AnonymousUser, *, roles: frozenset[str] = READ_ROLES
) -> OrgScope:
    """The organisations where ``user`` holds one of ``roles`` (by default those that read:
    a gateway account sees no rows): all for a superuser, none for anyone anonymous."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    if getattr(user, "is_superuser", False):
        return None
    user_id: int = user.pk  # type: ignore[assignment]  # authenticated: always saved
    members = OrganizationMember.objects.filter(user_id=user_id, role__in=sorted(roles))
    return frozenset(members.values_list("organization_id", flat=True))


def scope_filter(rows: QuerySet, scope: OrgScope, path: str) -> QuerySet:  # type: ignore[type-arg]
    """Keep only rows whose organisation (reached through ``path``) is in ``scope``."""
    if scope is None:
        return rows
    return rows.filter(**{f"{path}__in": list(scope)})


def org_path_register(model: type[Model], path: str) -> None:
    """Declare how ``model``'s rows reach their organisation (``path`` to its id)."""
    _ORG_PATHS[model._meta.label_lower] = path


def org_path_of(model: type[Model]) -> str | None:
    """The registered path of ``model``; users reach organisations through their
    memberships. None: the model has no organisation (its rows are for superusers)."""
    if model is get_user_model():
        return USER_ORG_PATH
    return _ORG_PATHS.get(model._meta.label_lower)
