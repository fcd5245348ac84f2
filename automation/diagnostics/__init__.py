"""Diagnostics reads (docs/spec.md §9): the timeline of a device command and of a rule
execution, commands retrying or uncertain, devices with the most ack timeouts.

Every read is a selector over the ledger (events, executions, commands, transitions, receipts):
nothing here writes, so support can run it against production at any time. ``scope`` limits
rows to organisations (``None``: all), so the API and the admin reuse the same reads. The
timelines are ``timelines``, the incident lists ``incidents``.
"""

from automation.diagnostics.incidents import (
    DeviceTimeouts,
    TargetCooling,
    commands_retrying,
    commands_uncertain,
    decisions_suppressed,
    devices_top_timeouts,
    targets_cooling_down,
)
from automation.diagnostics.timelines import (
    Timeline,
    TimelineEntry,
    TimelineNotFound,
    command_timeline,
    commands_visible,
    execution_timeline,
    executions_visible,
    requester_name,
    timeline_lookup,
)

__all__ = [
    "DeviceTimeouts",
    "TargetCooling",
    "Timeline",
    "TimelineEntry",
    "TimelineNotFound",
    "command_timeline",
    "commands_retrying",
    "commands_uncertain",
    "commands_visible",
    "decisions_suppressed",
    "devices_top_timeouts",
    "execution_timeline",
    "executions_visible",
    "requester_name",
    "targets_cooling_down",
    "timeline_lookup",
]
