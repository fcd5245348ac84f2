"""Rollouts' gauges for ``/metrics``, read at scrape time (registered with ``config.metrics``
when the app loads): rollouts by state, and the targets of the rollouts not ended by state
(a sent target's state is its command's, as in the admin and the API)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from rollouts.models import Rollout, RolloutTarget
from rollouts.services.counts import PRUNED, Counts
from rollouts.states import ROLLOUT_ENDED, RolloutStatus, TargetStep

UNENDED = sorted(set(RolloutStatus.values) - ROLLOUT_ENDED)


def rollouts_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """Two grouped queries whatever the number of rollouts and targets; every state is
    answered (0 when none), so a panel or an alert never sees a series vanish."""
    rollouts = GaugeMetricFamily(
        "farm_rollouts",
        "Fleet rollouts by state (ended ones until RETENTION_ROLLOUTS_DAYS prunes them).",
        labels=["state"],
    )
    by_state = dict.fromkeys(RolloutStatus.values, 0)
    for state, n in Rollout.objects.values_list("status").annotate(n=Count("id")).order_by():
        by_state[state] = n
    for state, n in by_state.items():
        rollouts.add_metric([state], n)
    yield rollouts
    targets = GaugeMetricFamily(
        "farm_rollout_targets",
        "Targets of the rollouts not ended (scheduled, running, paused) by state: pending, "
        "skipped, or their command's status.",
        labels=["state"],
    )
    tally: Counter[str] = Counter()
    rows = (
        RolloutTarget.objects.filter(rollout__status__in=UNENDED)
        .values_list("step", "command__status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for step, status, n in rows:
        tally[step if step != TargetStep.SENT else (status or PRUNED)] += n
    for state, n in Counts(dict(tally)).as_dict().items():
        targets.add_metric([state], n)
    yield targets
