"""Response headers every page carries, whatever view made it."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

CSP_HEADER = "Content-Security-Policy"
FRAME_ANCESTORS = "frame-ancestors 'none'"


class FrameAncestorsMiddleware:
    """CSP ``frame-ancestors 'none'`` on every response (admin, API, health): no other site
    may frame a page of this one and trick a signed-in user into clicking through it. A view's
    own policy is kept and the directive added to it when it has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = response.get(CSP_HEADER, "").strip().rstrip(";")
        if not policy:
            response[CSP_HEADER] = FRAME_ANCESTORS
        elif "frame-ancestors" not in policy:
            response[CSP_HEADER] = f"{policy}; {FRAME_ANCESTORS}"
        return response
