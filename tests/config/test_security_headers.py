"""No page of the site may be framed by another (clickjacking): X-Frame-Options DENY and CSP
frame-ancestors 'none' on every response, the admin's included, whatever its status."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from config.security import FrameAncestorsMiddleware

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path", ["/admin/login/", "/admin/", "/api/v1/farms/", "/health", "/metrics", "/nowhere"]
)
def test_every_response_forbids_framing(client: Client, path: str) -> None:
    response = client.get(path)
    assert response["X-Frame-Options"] == "DENY"
    assert response["Content-Security-Policy"] == "frame-ancestors 'none'"


def test_the_admin_pages_of_a_signed_in_user_forbid_framing(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    response = client.get("/admin/notifications/notification/")
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]


def test_a_views_own_policy_is_kept_and_completed() -> None:
    def view(request: HttpRequest) -> HttpResponse:
        response = HttpResponse("ok")
        response["Content-Security-Policy"] = "default-src 'self';"
        return response

    response = FrameAncestorsMiddleware(view)(RequestFactory().get("/"))
    assert response["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
