"""``{{ value|endpoint_value:profile_endpoint }}``: a value in its endpoint's type and unit on
the admin's own pages, as every list and timeline shows it (``devices.display``)."""

from __future__ import annotations

from typing import Any

from django import template

from devices.display import endpoint_value_text
from devices.models import DeviceProfileEndpoint

register = template.Library()


@register.filter
def endpoint_value(value: Any, endpoint: DeviceProfileEndpoint | None = None) -> str:
    return endpoint_value_text(value, endpoint)
