"""What rollouts keep (``common.retention``): an ended rollout, by its end, with its targets,
its timeline and its selector's farm and device links; one scheduled, running or paused is
never pruned. Its commands are the ledger's and go by their own retention (a target whose
command went reads ``pruned``); with the same number of days a rollout outlives its commands
by at most how long it ran."""

from __future__ import annotations

from django.db.models import Q

from common.retention import Retention, retention_register
from rollouts.models import Rollout
from rollouts.states import ROLLOUT_ENDED


def _selector_links() -> tuple[str, ...]:
    """The many-to-many tables of the selector (farms, devices): rows of the rollout."""
    return tuple(
        f.remote_field.through._meta.label  # type: ignore[union-attr]
        for f in Rollout._meta.many_to_many
    )


def rollouts_retention_register() -> None:
    retention_register(
        Retention(
            "rollouts.Rollout",
            "RETENTION_ROLLOUTS_DAYS",
            "ended_at",
            prunable=Q(status__in=sorted(ROLLOUT_ENDED)),
            children=("rollouts.RolloutTarget", "rollouts.RolloutTransition", *_selector_links()),
        )
    )
