"""CSV answers beside the API's JSON: a renderer a view adds for ``?format=csv`` (or
``Accept: text/csv``), and the rule that an error is still answered in the one JSON shape
(``common.errors``), whatever format the request asked for."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

CSV_MEDIA_TYPE = "text/csv"


def csv_lines(rows: Iterable[Sequence[Any]]) -> str:
    """``rows`` as RFC 4180 CSV (CRLF line ends, fields quoted only where they must be)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


class CsvRenderer(BaseRenderer):
    """A header line, then one line per row of ``rows(data)``: a subclass names both."""

    media_type = CSV_MEDIA_TYPE
    format = "csv"
    charset = "utf-8"
    header: tuple[str, ...] = ()

    def rows(self, data: Any) -> Iterable[Sequence[Any]]:
        raise NotImplementedError(f"{type(self).__name__} names the rows of its answer")

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        return csv_lines([self.header, *self.rows(data)]).encode(self.charset)


class CsvErrorsAsJson(APIView):
    """Mixed into a view with a CSV renderer: an error answer (a 400 naming a parameter, a
    404) is the API's JSON error, not a CSV rendering of it."""

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        renderer = getattr(request, "accepted_renderer", None)
        if (
            isinstance(response, Response)
            and response.exception
            and isinstance(renderer, CsvRenderer)
        ):
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)
