"""Organisations and members over the REST API (``/api/v1/organizations/``,
``/api/v1/members/``). A viewer lists the organisations they belong to and their members;
an organisation's admin adds, re-roles and removes its members; only a superuser creates
organisations (``required_roles``). Another organisation's rows are a 404, a write the role
does not allow a 403."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django.urls import include, path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from common import schema_docs
from common.api import ScopedViewSet, idempotent, request_scope
from common.filters import IdFilter
from common.members.selectors import members_visible, organizations_visible
from common.members.serializers import (
    MemberCreateSerializer,
    MemberSerializer,
    MemberUpdateSerializer,
    OrganizationSerializer,
)
from common.members.services import (
    MembershipRefused,
    member_add,
    member_remove,
    member_role_change,
    organization_create,
)
from common.models import Organization, OrganizationMember
from common.permissions import require_organization
from common.roles import Need, action_roles
from common.tenancy import OrgScope

_LAST_ADMIN = OpenApiResponse(
    description="invalid: the organisation's last admin cannot be removed (fields.user)"
)


def _field_error(exc: MembershipRefused) -> ValidationError:
    return ValidationError({exc.field: [str(exc)]})


@schema_docs.ORGANIZATIONS
class OrganizationViewSet(ScopedViewSet):
    """The caller's organisations; a superuser creates them."""

    serializer_class = OrganizationSerializer
    queryset = Organization.objects.none()
    required_roles = {"list": Need.READ, "retrieve": Need.READ, "create": Need.SUPERUSER}

    def scoped(self, scope: OrgScope) -> QuerySet[Organization]:
        return organizations_visible(scope=scope)

    @idempotent(request=OrganizationSerializer, responses={201: OrganizationSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Superusers only."""
        body = OrganizationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            organization = organization_create(name=body.validated_data["name"])
        except MembershipRefused as exc:
            raise _field_error(exc) from None
        return Response(OrganizationSerializer(organization).data, status=status.HTTP_201_CREATED)


class MemberFilter(django_filters.FilterSet):
    organization = IdFilter(field_name="organization_id", help_text="only this organisation")

    class Meta:
        model = OrganizationMember
        fields = ("organization",)


@schema_docs.MEMBERS
class MemberViewSet(ScopedViewSet):
    """The members of the caller's organisations and their roles; an admin manages them."""

    serializer_class = MemberSerializer
    queryset = OrganizationMember.objects.none()
    filterset_class = MemberFilter
    required_roles = action_roles(configure=("create", "partial_update", "destroy"))
    organization_path = "organization.pk"

    def scoped(self, scope: OrgScope) -> QuerySet[OrganizationMember]:
        return members_visible(scope=scope)

    @idempotent(request=MemberCreateSerializer, responses={201: MemberSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        context = {"scope": request_scope(request)}
        body = MemberCreateSerializer(data=request.data, context=context)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        require_organization(request, self, data["organization"].pk)
        try:
            member = member_add(
                organization=data["organization"], user=data["user"], role=data["role"]
            )
        except MembershipRefused as exc:
            raise _field_error(exc) from None
        return Response(MemberSerializer(member).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=MemberUpdateSerializer, responses=MemberSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        member: OrganizationMember = self.get_object()
        body = MemberUpdateSerializer(member, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        if "role" in body.validated_data:
            try:
                member = member_role_change(
                    member=member,
                    role=body.validated_data["role"],
                    by_superuser=request.user.is_superuser,
                )
            except MembershipRefused as exc:
                raise _field_error(exc) from None
        return Response(MemberSerializer(member).data)

    @extend_schema(responses={204: None, 400: _LAST_ADMIN})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        member: OrganizationMember = self.get_object()
        try:
            member_remove(member=member, by_superuser=request.user.is_superuser)
        except MembershipRefused as exc:
            raise _field_error(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


router = SimpleRouter()
router.register("organizations", OrganizationViewSet, basename="organization")
router.register("members", MemberViewSet, basename="member")

urlpatterns = [path("", include(router.urls))]
