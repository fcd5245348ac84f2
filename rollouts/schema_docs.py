"""What the API docs say of each operation of fleet rollouts (``rollouts.api``): a one-line
summary and a description of its own, and a realistic example of a new rollout. Kept apart
from the views so that each view reads as code; the view names its entry here
(``@schema_docs.ROLLOUTS``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view

ROLLOUT_EXAMPLES = [
    OpenApiExample(
        "Close the vents before a storm",
        value={
            "name": "Vents shut for the storm",
            "farm_ids": [1, 2],
            "profile_id": 3,
            "endpoint_key": "io1",
            "value": False,
            "reason": "storm warning for tonight",
            "priority": 100,
            "canary_size": 5,
            "base_rate_per_minute": 10,
            "max_live_per_farm": 10,
            "abort_criteria": [{"outcome": "failed", "min_finished": 10, "threshold_pct": 20}],
        },
        request_only=True,
    ),
]

ROLLOUTS = extend_schema_view(
    list=extend_schema(
        summary="List rollouts",
        description="The rollouts of the caller's organisations, newest first, paged by "
        "cursor, each with its plan, state and targets counted per state; `state` narrows "
        "the list.",
    ),
    create=extend_schema(summary="Start a rollout", examples=ROLLOUT_EXAMPLES),
    retrieve=extend_schema(
        summary="Get a rollout",
        description="One rollout: its plan, its state, where its driver is (rate, waves, "
        "canary, ramp), the abort criterion that tripped if one did, and its targets counted "
        "per state.",
    ),
    pause=extend_schema(summary="Pause a rollout"),
    resume=extend_schema(summary="Resume a paused rollout"),
    cancel=extend_schema(summary="Cancel a rollout"),
    targets=extend_schema(summary="List a rollout's targets"),
    timeline=extend_schema(summary="Get a rollout's timeline"),
)
