"""Support's rollout pages: the list (state and progress first), a rollout's read-only page
(its plan, counters per target state, progress, the tripped abort criterion, the timeline)
with pause / resume / cancel buttons, and its targets as a filtered read-only list. A move
asks for a reason and calls ``rollouts.services.lifecycle.rollout_act`` (a compare-and-set
with its audit row), as the API does; it operates, so it needs the ``operator`` role in the
rollout's organisation (``common.admin``). Rollouts are created through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import ReadOnlyAdmin, ReasonForm
from common.roles import Need
from devices.display import endpoint_value_text
from devices.models import DeviceProfileEndpoint
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.services.counts import (
    PRUNED,
    Counts,
    rollout_count,
    rollout_waves,
    rollouts_count,
)
from rollouts.services.lifecycle import RolloutMoveRefused, rollout_act
from rollouts.states import ROLLOUT_ENDED, RolloutStatus, TargetStep
from scheduler.services.support import SupportReasonMissing

TARGETS_URL = "admin:rollouts_rollouttarget_changelist"
# The buttons a rollout's state offers: (action, title).
BUTTONS: dict[str, list[tuple[str, str]]] = {
    RolloutStatus.SCHEDULED: [("pause", "Pause…"), ("cancel", "Cancel…")],
    RolloutStatus.RUNNING: [("pause", "Pause…"), ("cancel", "Cancel…")],
    RolloutStatus.PAUSED: [("resume", "Resume…"), ("cancel", "Cancel…")],
}


def progress_of(counts: Counts) -> tuple[int, int]:
    """(done, total): targets whose command ended (pruned ones had ended) or were skipped."""
    done = counts.finished + counts[TargetStep.SKIPPED] + counts[PRUNED]
    return done, counts.total


# A rollout that stopped short: its bar says so, in its own colour, not as a full bar.
STOPPED_SHORT: dict[str, str] = {
    RolloutStatus.ABORTED: "#ba2121",
    RolloutStatus.CANCELLED: "#767676",
}


def progress_html(counts: Counts, state: str = "") -> SafeString:
    """``<progress>`` and ``3 / 6 (50%)``; an aborted or cancelled rollout's bar is marked
    (class ``rollout-progress rollout-<state>``, its colour, the state before the counts)."""
    done, total = progress_of(counts)
    pct = 100 * done // total if total else 0
    colour = STOPPED_SHORT.get(state)
    return format_html(
        '<span class="rollout-progress rollout-{}">{}<progress value="{}" max="{}" '
        'style="width: 8em{}">{}%</progress> {} / {} ({}%)</span>',
        state or "unknown",
        format_html('<strong style="color: {}">{} </strong>', colour, state) if colour else "",
        done,
        max(total, 1),
        format_html("; accent-color: {}", colour) if colour else "",
        pct,
        done,
        total,
        pct,
    )


def _state_filter(state: str) -> str:
    """The targets list's query for one counter (none for pruned: no such filter)."""
    if state in (TargetStep.PENDING, TargetStep.SKIPPED):
        return f"step__exact={state}"
    return "" if state == PRUNED else f"command__status__exact={state}"


def counters_html(rollout: Rollout, counts: Counts) -> SafeString:
    """One row per target state, each count a link to those targets."""
    base = f"{reverse(TARGETS_URL)}?rollout__id__exact={rollout.pk}"

    def cell(state: str, n: int) -> SafeString:
        query = _state_filter(state)
        if not n or not query:
            return format_html("{}", n)
        return format_html('<a href="{}&amp;{}">{}</a>', base, query, n)

    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td></tr>",
        ((state, cell(state, n)) for state, n in counts.as_dict().items()),
    )
    return format_html(
        '<table class="rollout-counters"><thead><tr><th>target state</th><th>targets</th>'
        '</tr></thead><tbody>{}</tbody><tfoot><tr><th>total</th><th><a href="{}">{}</a>'
        "</th></tr></tfoot></table>",
        rows,
        base,
        counts.total,
    )


def tripped_text(tripped: Any) -> str:
    """``failed ≥ 20% of ≥ 5 finished: 3 of 10 finished (30.0%)``, or "" when none tripped."""
    if not isinstance(tripped, dict):
        return ""
    c = tripped.get("criterion") or {}
    return (
        f"{c.get('outcome')} ≥ {c.get('threshold_pct')}% of ≥ {c.get('min_finished')} "
        f"finished: {tripped.get('count')} of {tripped.get('finished')} finished "
        f"({tripped.get('pct')}%)"
    )


def _move_text(from_status: str, to_status: str) -> str:
    """``created → scheduled``, ``running → paused``."""
    return f"{from_status or 'created'} → {to_status}"


def timeline_html(rollout: Rollout) -> SafeString:
    """The rollout's moves and, between them, its waves (as its targets record them)."""
    moves = RolloutTransition.objects.filter(rollout=rollout).select_related("actor")
    rows = [
        (t.at, 0, t.pk, _move_text(t.from_status, t.to_status), _actor(t), t.reason) for t in moves
    ]
    rows += [(w.at, 1, w.wave, "wave", "driver", str(w)) for w in rollout_waves(rollout.pk)]
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (at.strftime("%Y-%m-%d %H:%M:%S"), move, by, reason)
            for at, _, _, move, by, reason in sorted(rows)
        ),
    )
    return format_html(
        "<table><thead><tr><th>at (UTC)</th><th>move</th><th>by</th><th>reason</th></tr>"
        "</thead><tbody>{}</tbody></table>",
        body,
    )


def _actor(move: RolloutTransition) -> str:
    return move.actor.get_username() if move.actor else "driver"


def rollout_action(
    action: str, title: str
) -> Callable[[Any, HttpRequest, QuerySet[Any]], TemplateResponse | None]:
    """An admin action that asks for a required reason (``common``'s reason page), then calls
    ``rollout_act`` for each selected rollout of an organisation where the user operates."""

    def apply(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        rows = list(modeladmin.rows_meeting(request, Need.OPERATE, queryset))
        if not form.is_valid():
            context = {
                **modeladmin.admin_site.each_context(request),
                "title": title.rstrip("…"),
                "rows": rows,
                "action": action,
                "form": form,
                "opts": modeladmin.model._meta,
            }
            return TemplateResponse(request, "admin/reason_action.html", context)
        refused = []
        for row in rows:
            try:
                rollout_act(
                    rollout_id=row.pk,
                    action=action,
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                )
            except (RolloutMoveRefused, SupportReasonMissing, Rollout.DoesNotExist) as exc:
                refused.append(f"#{row.pk}: {exc}")
        done = len(rows) - len(refused)
        text = f"{title.rstrip('…')}: {done} done, {len(refused)} refused"
        level = messages.WARNING if refused else messages.SUCCESS
        modeladmin.message_user(request, "; ".join([text, *refused]), level)
        return None

    apply.__name__ = action
    apply.short_description = title  # type: ignore[attr-defined]
    apply.allowed_permissions = ("operate",)  # type: ignore[attr-defined]
    return apply


class RolloutChangeList(ChangeList):
    """Counts the page's rollouts in one grouped query, not one per row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        counts = rollouts_count(r.pk for r in self.result_list)
        for row in self.result_list:
            row.counts = counts[row.pk]


@admin.register(Rollout)
class RolloutAdmin(ReadOnlyAdmin):
    org_path = "organization_id"
    change_form_template = "admin/rollouts/rollout/change_form.html"
    list_display = ("name", "organization", "status", "progress", "created_at")
    list_display_links = ("name",)
    list_filter = ("status", "organization")
    list_select_related = ("organization",)
    search_fields = ("name",)
    date_hierarchy = "created_at"
    actions = (
        rollout_action("pause", "Pause…"),
        rollout_action("resume", "Resume…"),
        rollout_action("cancel", "Cancel…"),
    )
    fieldsets = (
        (None, {"fields": ("name", "organization", "status", "reason", "requested_by")}),
        ("Progress", {"fields": ("progress", "counters", "tripped_criterion", "targets_link")}),
        (
            "Plan",
            {
                "fields": (
                    "mode",
                    "farms",
                    "profile",
                    "endpoint_key",
                    "selected_devices",
                    "value_json",
                    "priority",
                    ("start_local", "end_local", "end_behaviour"),
                    "canary_size",
                    ("base_rate_per_minute", "increment_factor", "ramp_every_applied"),
                    ("max_rate_per_minute", "max_live_per_farm"),
                    "abort_criteria",
                )
            },
        ),
        (
            "Driver",
            {
                "fields": (
                    ("canary_left", "ramping", "waves"),
                    ("rate_per_minute", "ramp_next_applied"),
                    ("created_at", "ticked_at", "updated_at", "ended_at"),
                )
            },
        ),
        ("Timeline", {"fields": ("timeline",)}),
    )
    readonly_fields = (
        "progress",
        "counters",
        "tripped_criterion",
        "targets_link",
        "selected_devices",
        "value_json",
        "timeline",
    )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RolloutChangeList

    def _counts(self, obj: Rollout) -> Counts:
        counts = getattr(obj, "counts", None)
        if counts is None:
            counts = obj.counts = rollout_count(obj.pk)  # type: ignore[attr-defined]
        return counts

    @admin.display(description="progress (finished + skipped)")
    def progress(self, obj: Rollout) -> SafeString:
        return progress_html(self._counts(obj), obj.status)

    @admin.display(description="targets by state")
    def counters(self, obj: Rollout) -> SafeString:
        return counters_html(obj, self._counts(obj))

    @admin.display(description="abort criterion tripped")
    def tripped_criterion(self, obj: Rollout) -> str:
        return tripped_text(obj.tripped) or "none"

    @admin.display(description="targets")
    def targets_link(self, obj: Rollout) -> SafeString:
        url = f"{reverse(TARGETS_URL)}?rollout__id__exact={obj.pk}"
        return format_html('<a href="{}">all {} target(s)</a>', url, self._counts(obj).total)

    @admin.display(description="devices (only these, when given)")
    def selected_devices(self, obj: Rollout) -> str:
        serials = list(obj.devices.order_by("serial_number").values_list("serial_number")[:21])
        shown = ", ".join(s for (s,) in serials[:20])
        return "all of the farms' devices" if not serials else shown + (" …" * (len(serials) > 20))

    @admin.display(description="value")
    def value_json(self, obj: Rollout) -> str:
        """In the endpoint's type and unit, as every page shows values (``false``, ``21.5 °C``),
        not as Python prints it."""
        endpoint = DeviceProfileEndpoint.objects.filter(
            profile_id=obj.profile_id, key=obj.endpoint_key
        ).first()
        return endpoint_value_text(obj.value, endpoint)

    @admin.display(description="timeline")
    def timeline(self, obj: Rollout) -> SafeString:
        return timeline_html(obj)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        """The moves a rollout's state allows, for a user who may operate it; each posts
        the list's action for this rollout (so it asks for the reason there)."""
        obj = self.get_object(request, object_id)
        buttons: list[tuple[str, str]] = []
        if (
            obj is not None
            and obj.status not in ROLLOUT_ENDED
            and self.has_operate_permission(request, obj)
        ):
            buttons = BUTTONS.get(obj.status, [])
        context = {**(extra_context or {}), "rollout_buttons": buttons}
        return super().change_view(request, object_id, form_url, context)


@admin.register(RolloutTarget)
class RolloutTargetAdmin(ReadOnlyAdmin):
    """A rollout's targets (open from its page: ``?rollout__id__exact=``): where each stands
    and its command, one click away."""

    org_path = "rollout__organization_id"
    list_display = (
        "id",
        "rollout_id",
        "device",
        "endpoint_key",
        "state",
        "reason",
        "wave",
        "command_link",
        "updated_at",
    )
    list_filter = ("step", "command__status", "reason", "rollout")
    list_select_related = ("endpoint__device", "endpoint__profile_endpoint", "command")
    search_fields = ("endpoint__device__serial_number",)

    @admin.display(description="device", ordering="endpoint__device__serial_number")
    def device(self, obj: RolloutTarget) -> str:
        return obj.endpoint.device.serial_number

    @admin.display(description="endpoint")
    def endpoint_key(self, obj: RolloutTarget) -> str:
        return obj.endpoint.profile_endpoint.key

    @admin.display(description="state")
    def state(self, obj: RolloutTarget) -> str:
        if obj.step != TargetStep.SENT:
            return obj.step
        return obj.command.status if obj.command else PRUNED

    @admin.display(description="command")
    def command_link(self, obj: RolloutTarget) -> SafeString | str:
        if obj.command_id is None:
            return ""
        url = reverse("admin:automation_devicecommand_change", args=[obj.command_id])
        return format_html('<a href="{}">#{}</a>', url, obj.command_id)
