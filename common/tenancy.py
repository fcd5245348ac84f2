"""Who sees what: a user's organisations, and a filter that keeps a query inside them. The
admin and the API of every app go through these, so another organisation's rows are simply
not there (a 404, not a 403)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from common.models import OrganizationMember

# ``None`` means "every organisation" (a superuser); otherwise the ids the user belongs to.
OrgScope = frozenset[int] | None


def organization_scope(user: AbstractBaseUser | AnonymousUser) -> OrgScope:
    """The organisations ``user`` may see: all for a superuser, none for anyone anonymous."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    if getattr(user, "is_superuser", False):
        return None
    user_id: int = user.pk  # type: ignore[assignment]  # authenticated: always saved
    return frozenset(
        OrganizationMember.objects.filter(user_id=user_id).values_list("organization_id", flat=True)
    )


def scope_filter(rows: QuerySet, scope: OrgScope, path: str) -> QuerySet:  # type: ignore[type-arg]
    """Keep only rows whose organisation (reached through ``path``) is in ``scope``."""
    if scope is None:
        return rows
    return rows.filter(**{f"{path}__in": list(scope)})
