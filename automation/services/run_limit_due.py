"""At due time, the follow-up of a command's run-time limit (``automation.services.run_limits``):
one command, origin ``run_limit``, back to the limit's value, through the normal gates and
dispatch. Its idempotency key is the due-work row's key, so it exists once across restarts,
two beats and a killed worker; it is created under the endpoint's evaluation lock, so a
decision or a manual command cannot interleave.

The row is deactivated instead, nothing written, when a later command changed the endpoint
first (one created after the limited command, neither superseded nor failed: it decided the
endpoint since), or the endpoint already reports the value and nothing is on its way."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from automation.models import DeviceCommand
from automation.services.commands import CommandRow, command_fields
from automation.services.run_limits import run_limit_input, run_limit_value
from automation.services.spine import Committed, hand_on_commit
from automation.services.targets import (
    NewCommand,
    commands_supersede_unsent,
    target_states_load,
    targets_lock,
)
from automation.services.transitions import CommandInsert, Transition, commands_insert
from automation.states import CommandOrigin, CommandStatus, ReasonCode
from scheduler.keys import RunLimitKey, SchedulerKeyError, parse_scheduler_key, scheduler_input_hash
from scheduler.registry import (
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    SchedulerJob,
    SourceNoLongerValid,
)

# Later commands that never decided the endpoint: replaced before they were sent, or refused.
_NEVER_CHANGED = Q(status=CommandStatus.FAILED) | Q(
    status=CommandStatus.EXPIRED,
    status_reason__in=[ReasonCode.SUPERSEDED, ReasonCode.ROLLOUT_STOPPED],
)


def run_limit_resolve(job: SchedulerJob) -> DeviceCommand:
    """The limited command the row stands for (its endpoint and profile loaded); the typed
    outcome when the row may no longer run."""
    try:
        spec = parse_scheduler_key(job.scheduler_key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, RunLimitKey):
        raise PermanentFailure(f"not a run-limit key: {job.scheduler_key[:80]}")
    command = (
        DeviceCommand.objects.select_related(
            "target_device_endpoint__profile_endpoint", "target_device_endpoint__device"
        )
        .filter(pk=int(spec.command_id))
        .first()
    )
    if command is None:
        raise SourceNoLongerValid(f"command {spec.command_id} is gone")
    if command.status != CommandStatus.APPLIED or not command.max_on_s:
        raise SourceNoLongerValid(f"command {command.pk} is not an applied limited command")
    if scheduler_input_hash(run_limit_input(command)) != job.input_hash:
        raise HoldForSupport("the reloaded limit hashes differently")
    return command


def _changed_since(command: DeviceCommand) -> int | None:
    """The first later command that decided the endpoint, if any."""
    later = DeviceCommand.objects.filter(
        target_device_endpoint_id=command.target_device_endpoint_id, pk__gt=command.pk
    ).exclude(_NEVER_CHANGED)
    return later.order_by("pk").values_list("pk", flat=True).first()


def _existing(key: str) -> int | None:
    return DeviceCommand.objects.filter(idempotency_key=key).values_list("pk", flat=True).first()


def run_limit_run(job: SchedulerJob) -> HandlerResult:
    """Create the follow-up, or drop it (see the module docstring)."""
    command = run_limit_resolve(job)
    # "intents" lists the commands made: the key these stored results have always had.
    coordinates = {"command": command.pk}
    value = run_limit_value(command)
    if value is None:
        raise SourceNoLongerValid(f"command {command.pk}: no value to return to")
    endpoint = command.target_device_endpoint
    with transaction.atomic():
        targets_lock([endpoint.pk])
        found = _existing(job.scheduler_key)  # an earlier run made it: the same follow-up
        if found is not None:
            return HandlerResult({**coordinates, "outcome": "created", "intents": [found]})
        later = _changed_since(command)
        if later is not None:
            raise SourceNoLongerValid(f"command {later} changed the endpoint first")
        targets = target_states_load([endpoint.pk])
        state = targets[endpoint.pk]
        if not state.live and state.known_to_hold(value):
            raise SourceNoLongerValid(f"the endpoint already reports {value!r}")
        row = CommandRow(
            origin=CommandOrigin.RUN_LIMIT,
            target_device=endpoint.device_id,
            target_device_endpoint=endpoint.pk,
            columns=command_fields(endpoint, value, key=job.scheduler_key, now=job.now),
            request_reason=f"run-time limit of command {command.pk}: {command.max_on_s} s",
        )
        detail = f"command {command.pk} applied {command.max_on_s} s ago: back to {value!r}"
        step = Transition(CommandStatus.PENDING_DISPATCH, ReasonCode.RUN_LIMIT, detail)
        made = commands_insert([CommandInsert(row, step)], now=job.now)
        if not made:  # a concurrent run of the same row made it first
            found = _existing(job.scheduler_key)
            return HandlerResult({**coordinates, "outcome": "created", "intents": [found]})
        (pk,) = made.values()
        replacing = {endpoint.pk: state.superseded(NewCommand(value))}
        pending = commands_supersede_unsent(replacing, [(pk, endpoint.pk)], job.now)
        hand_on_commit(Committed(commands=pending))
    return HandlerResult({**coordinates, "outcome": "created", "intents": [pk]})
