"""The API's body parsers. The API reads JSON only: a form has no types (``true`` arrives as
``"True"``, a nested object cannot be said at all), so a client that sends one is answered 415
``unsupported_media_type``; only the browsable API's own HTML forms, which ask for HTML back,
are still parsed as forms.

The JSON parser is DRF's, bounded. A body nested too deep is a 400 before any serializer sees
it (DRF's parser lets Python's ``RecursionError`` through, a 500), and a number that overflows
to infinity (``1e999``) is refused like ``NaN``. The body's size is bounded by Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``, read before parsing (413)."""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import BaseParser, FormParser, JSONParser, MultiPartParser
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.utils.json import strict_constant

from common.validators import JSON_MAX_DEPTH, json_bounds_violation

# A body holds fields that may each nest JSON_MAX_DEPTH levels (a telemetry batch puts a
# payload three levels down); deeper than this, no field can be valid.
BODY_MAX_DEPTH = 2 * JSON_MAX_DEPTH


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range for a JSON number")
    return value


class BoundedJSONParser(JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        try:
            text = codecs.getreader(encoding)(stream).read()
            data = json.loads(text, parse_constant=strict_constant, parse_float=_finite_float)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {BODY_MAX_DEPTH} levels") from None
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
            raise ParseError(f"JSON parse error - {exc}") from None
        violation = json_bounds_violation(data, max_depth=BODY_MAX_DEPTH, max_bytes=None)
        if violation is not None:
            raise ParseError(f"JSON {violation.message}")
        return data


def _browsable(parser_context: Mapping[str, Any] | None) -> bool:
    """Whether the request asked for the browsable API's HTML (its forms do; content
    negotiation has chosen the renderer before any body is read)."""
    request = (parser_context or {}).get("request")
    return isinstance(getattr(request, "accepted_renderer", None), BrowsableAPIRenderer)


class _BrowsableFormsOnly(BaseParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        if not _browsable(parser_context):
            raise UnsupportedMediaType(media_type or self.media_type)
        return super().parse(stream, media_type, parser_context)


class BrowsableFormParser(_BrowsableFormsOnly, FormParser):
    """A url-encoded form from the browsable API's pages; from any other client a 415."""


class BrowsableMultiPartParser(_BrowsableFormsOnly, MultiPartParser):
    """A multipart form from the browsable API's pages; from any other client a 415."""
