"""Domain events the reminders app publishes (``DocumentChanged`` is declared by the events
app). Payloads carry identities and the facts a consumer decides on; handlers reload."""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from events.registry import event_type_declare


class EndpointMetricChangedPayload(TypedDict):
    source_id: Annotated[str, "the metric source's guid (the reminder source)"]
    farm_id: int
    metric_key: Annotated[str, "what the metric measures, e.g. silo_level"]
    change: Literal["created", "updated", "deleted"]


ENDPOINT_METRIC_CHANGED = event_type_declare(
    "EndpointMetricChanged",
    schema=EndpointMetricChangedPayload,
    description="An endpoint metric source (a metric over an endpoint's recent values) was "
    "created, reconfigured or deactivated. Threshold reminders are re-evaluated.",
)


class ReminderSettingChangedPayload(TypedDict):
    setting_id: Annotated[str, "the reminder setting's guid"]
    farm_id: Annotated[int | None, "the farm it applies to; None for an organisation setting"]
    organization_id: Annotated[int | None, "the organisation for an organisation setting"]
    source_type: Annotated[str, "document or endpoint_metric"]
    changed_fields: Annotated[list[str], "names of the fields that changed ('created' if new)"]
    active: bool


REMINDER_SETTING_CHANGED = event_type_declare(
    "ReminderSettingChanged",
    schema=ReminderSettingChangedPayload,
    description="A reminder setting was created or changed. Offsets, dates and thresholds "
    "recreate occurrences, a send time moves them in place, template and delivery changes "
    "leave pending rows alone, and deactivation deactivates pending rows.",
)
