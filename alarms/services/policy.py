"""A farm's alarm policy, with the defaults for a farm that has none."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from alarms.models import AlarmPolicy
from alarms.states import DEFAULT_RAISE_ON, DEFAULT_RECIPIENTS, DEFAULT_REPEAT_EVERY_S


@dataclass(frozen=True)
class Policy:
    command_statuses: frozenset[str]
    repeat_every_s: int
    recipients: dict[str, str]

    def recipient_policy(self, severity: str) -> str:
        return self.recipients.get(severity, DEFAULT_RECIPIENTS.get(severity, ""))


DEFAULT_POLICY = Policy(
    command_statuses=frozenset(DEFAULT_RAISE_ON),
    repeat_every_s=DEFAULT_REPEAT_EVERY_S,
    recipients={str(k): v for k, v in DEFAULT_RECIPIENTS.items()},
)


def _policy(row: AlarmPolicy) -> Policy:
    return Policy(
        command_statuses=frozenset(row.command_statuses or ()),
        repeat_every_s=max(1, int(row.repeat_every_s)),
        recipients={**DEFAULT_POLICY.recipients, **(row.recipients or {})},
    )


def alarm_policies_get(farm_ids: Iterable[int]) -> dict[int, Policy]:
    """Each farm's policy in one query; the defaults for a farm without a row."""
    wanted = set(farm_ids)
    found = {row.farm_id: _policy(row) for row in AlarmPolicy.objects.filter(farm_id__in=wanted)}
    return {farm_id: found.get(farm_id, DEFAULT_POLICY) for farm_id in wanted}


def alarm_policy_get(farm_id: int) -> Policy:
    return alarm_policies_get([farm_id])[farm_id]
