"""Support's automation pages: the command list (what is wrong first, the stuck filter, a
constant number of queries), a command's page (timeline, buttons that go through the support
services and leave an audit row), the device list and chart, and the diagnostics page, for a
superuser and scoped for an organisation's staff."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.admin.chart import MAX_BUCKETS
from automation.admin.chart import WIDTH as CHART_WIDTH
from automation.models import CommandTransition, DeviceCommand
from automation.services.ingest import telemetry_ingest
from automation.states import CommandStatus, ReasonCode
from devices.models import Device, DeviceProfileEndpoint
from devices.mqtt.messages import InboundTelemetry
from tests.automation.conftest import dispatch, make_intent, time_out
from tests.conftest import Tenant
from tests.devices.factories import DeviceFactory, FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
INTENT_URL = "/admin/automation/devicecommand/"
DEVICE_URL = "/admin/devices/device/"
DIAGNOSTICS_URL = f"{INTENT_URL}diagnostics/"


def _kits(n: int, start: int = 0) -> list[FarmKit]:
    kits = [make_farm(prefix=f"k{start + i}") for i in range(n)]
    for kit in kits:
        kit.rule()
    return kits


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_command_list_shows_what_is_wrong_first_in_constant_queries(support: Client) -> None:
    for kit in _kits(2):
        dispatch(make_intent(kit))
    page = support.get(INTENT_URL)
    headers = re.findall(
        r'<th scope="col" class="(?:sortable )?column-(\w+)', page.content.decode()
    )
    assert headers[:3] == ["status", "status_reason", "age"]
    intent = DeviceCommand.objects.first()
    assert intent is not None
    device_url = f"{DEVICE_URL}{intent.target_device_id}/change/"
    assert f'href="{device_url}"'.encode() in page.content
    few = _queries(support, INTENT_URL)
    for kit in _kits(4, start=2):
        make_intent(kit)
    assert DeviceCommand.objects.count() == 6
    assert _queries(support, INTENT_URL) == few


def test_command_list_shows_its_key_columns_and_values_as_their_endpoints_type(
    support: Client,
) -> None:
    (kit,) = _kits(1)
    DeviceCommand.objects.filter(pk=dispatch(make_intent(kit)).pk).update(target_value=False)
    page = support.get(INTENT_URL).content.decode()
    headers = re.findall(r'<th scope="col" class="(?:sortable )?column-(\w+)', page)
    # The key columns at 1400 px: nothing long (the MQTT command id, the method) in between.
    assert headers == [
        "status",
        "status_reason",
        "age",
        "id",
        "device",
        "endpoint",
        "value",
        "origin",
        "tries",
    ]
    assert '<td class="field-value">false</td>' in page  # not "False"


def test_a_commands_page_leads_with_state_target_value_origin_then_its_timeline(
    support: Client,
) -> None:
    (kit,) = _kits(1)
    intent = dispatch(make_intent(kit))
    html = support.get(f"{INTENT_URL}{intent.pk}/change/").content.decode()
    first = [
        'id="command-state"',
        "field-target",
        'class="readonly">true</div>',  # the value, as its endpoint's type reads
        "field-origin_shown",
        'id="command-timeline"',
        "Internals:",
    ]
    at = [html.index(marker) for marker in first]
    assert at == sorted(at), dict(zip(first, at, strict=True))
    internals = html[html.index('<fieldset class="module aligned collapse"') :]
    internals = internals[: internals.index("</fieldset>")]
    for name in ("idempotency_key", "desired_state_fingerprint", "lease_expires_at", "version"):
        assert f"field-{name}" in internals and f"field-{name}" not in html.split(internals)[0]
    timeline = html[html.index('id="command-timeline"') :]
    assert "rule command created: setIO io1=true to " in timeline  # not {'io1': True}
    assert f'href="/admin/automation/automationrule/{intent.rule_id}/change/"' in html


def test_stuck_filter_lists_live_commands_older_than_the_choice(support: Client) -> None:
    old_live, new_live, old_ended = (make_intent(kit) for kit in _kits(3))
    long_ago = timezone.now() - timedelta(minutes=20)
    DeviceCommand.objects.filter(pk__in=[old_live.pk, old_ended.pk]).update(created_at=long_ago)
    DeviceCommand.objects.filter(pk=old_ended.pk).update(status=CommandStatus.APPLIED)
    listed = {}
    for choice in ("15", "60"):
        page = support.get(INTENT_URL, {"stuck_min": choice}).content.decode()
        ids = (old_live.pk, new_live.pk, old_ended.pk)
        listed[choice] = {pk for pk in ids if f'href="{INTENT_URL}{pk}/change/' in page}
    assert listed == {"15": {old_live.pk}, "60": set()}
    everything = support.get(INTENT_URL, {"stuck_min": "7"}).content.decode()  # not a choice
    assert all(f"{INTENT_URL}{pk}/change/" in everything for pk in (old_live.pk, new_live.pk))


def _button(page: Any, action: str, pk: int) -> dict[str, Any]:
    """The form data of the page's button for ``action``, as the browser would post it."""
    html = page.content.decode()
    form = re.search(
        rf'<form method="post" action="{INTENT_URL}" class="action-button">(.*?)</form>',
        html,
        re.S,
    )
    assert form is not None, "no command button on the page"
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(1)))
    assert fields["action"] == action and fields["_selected_action"] == str(pk)
    return {"action": action, "_selected_action": [str(pk)], "index": fields["index"]}


def test_buttons_on_a_commands_page_ask_a_reason_and_go_through_the_services(
    support: Client,
) -> None:
    (kit,) = _kits(1)
    intent = dispatch(make_intent(kit))
    page = support.get(f"{INTENT_URL}{intent.pk}/change/")
    assert b"pending_dispatch -&gt; dispatched" in page.content  # the timeline table
    data = _button(page, "mark_failed", intent.pk)
    assert b'name="reason"' in support.post(INTENT_URL, data).content  # asks why first
    support.post(INTENT_URL, data | {"apply": "1", "reason": "relay wired wrong"}, follow=True)
    intent.refresh_from_db()
    assert intent.status == CommandStatus.FAILED and intent.inflight_endpoint_id is None
    audit = CommandTransition.objects.filter(command=intent).order_by("-pk").first()
    assert audit is not None and audit.reason_code == ReasonCode.MANUAL
    assert audit.detail == "by support: relay wired wrong"

    page = support.get(f"{INTENT_URL}{intent.pk}/change/")
    assert b'value="mark_failed"' not in page.content  # an ended command: retry only
    data = _button(page, "retry", intent.pk)
    done = support.post(INTENT_URL, data | {"apply": "1", "reason": "rewired"}, follow=True)
    assert b"1 done, 0 skipped" in done.content
    retry = DeviceCommand.objects.get(retry_of=intent)
    assert retry.status == CommandStatus.PENDING_DISPATCH
    # Who asked and why is the retry's first audit row; the original's page leads to it.
    audit = CommandTransition.objects.get(command=retry)
    assert audit.detail == f"retry of command {intent.pk} by support: rewired"
    page = support.get(f"{INTENT_URL}{intent.pk}/change/")
    assert f'{retry.pk}/change/">#{retry.pk}</a>' in page.content.decode()


def _extra_devices(kit: FarmKit, n: int) -> None:
    for _ in range(n):
        DeviceFactory(farm=kit.farm, profile=kit.actuator.profile)


def test_device_list_shows_online_values_and_open_commands_in_constant_queries(
    support: Client,
) -> None:
    (kit,) = _kits(1)
    make_intent(kit, temp=31)  # the sensor reports temp=31; a command opens on the relay
    Device.objects.filter(pk=kit.actuator.pk).update(  # as the health sweep leaves it
        last_seen_at=timezone.now() - timedelta(days=1), online=False
    )
    rows = support.get(DEVICE_URL).content.decode().split("<tr")
    sensor, relay = (
        next(r for r in rows if f">{d.serial_number}<" in r) for d in (kit.sensor, kit.actuator)
    )
    assert "icon-yes.svg" in sensor and "icon-no.svg" in relay  # online / offline
    assert "temp=31" in sensor
    open_link = f"?target_device__id__exact={kit.actuator.pk}&amp;status__in="
    assert open_link in relay and ">1</a>" in relay.split(open_link)[1]
    few = _queries(support, DEVICE_URL)
    _extra_devices(kit, 5)
    (other,) = _kits(1, start=1)
    make_intent(other)
    assert _queries(support, DEVICE_URL) == few


def _readings(kit: FarmKit, n: int) -> None:
    """``n`` sensor readings spread over the last 23 h, through ingestion."""
    now = timezone.now()
    messages = []
    for i in range(n):
        at = now - timedelta(hours=23) + i * timedelta(hours=23) / n
        values = {"temp": 20 + i % 7, "humidity": 50 + i % 3}
        payload = json.dumps({"ts": at.isoformat().replace("+00:00", "Z"), "values": values})
        messages.append(InboundTelemetry(kit.sensor.serial_number, payload, now))
    telemetry_ingest(messages=messages)


def _svg_text(html: str) -> str:
    found = re.search(r'<svg class="endpoint-chart".*?</svg>', html, re.S)
    assert found is not None, "no chart on the page"
    return found.group(0)


def _svg(page: Any) -> str:
    return _svg_text(page.content.decode())


def test_device_chart_has_a_series_per_endpoint_bounded_points_constant_queries(
    support: Client,
) -> None:
    kit = make_farm(prefix="chart")
    url = f"{DEVICE_URL}{kit.sensor.pk}/change/"
    _readings(kit, 10)
    svg = _svg(support.get(url))
    assert re.findall(r'class="series" data-endpoint="(\w+)"', svg) == ["humidity", "temp"]
    assert re.findall(r'data-points="(\d+)"', svg) == ["10", "10"]
    few = _queries(support, url)
    _readings(kit, 600)
    points = [int(n) for n in re.findall(r'data-points="(\d+)"', _svg(support.get(url)))]
    assert all(10 < n <= 2 * MAX_BUCKETS for n in points), points
    assert _queries(support, url) == few


def _panel(svg: str, key: str) -> str:
    found = re.search(rf'<g class="series" data-endpoint="{key}".*?</g>', svg, re.S)
    assert found is not None, f"no panel for {key}"
    return found.group(0)


def test_device_chart_fits_a_fresh_farm_and_draws_every_series_inside_its_frame(
    support: Client,
) -> None:
    """Twenty minutes of readings fill a 1 h chart, not a line at the right edge of a day;
    a constant series is a line across its panel, not an empty box; values carry their
    unit; the last time label ends inside the frame."""
    kit = make_farm(prefix="fresh")
    DeviceProfileEndpoint.objects.filter(pk=kit.temp.profile_endpoint_id).update(unit="°C")
    now = timezone.now()
    messages = []
    for i in range(5):
        at = (now - timedelta(minutes=20 - 5 * i)).isoformat().replace("+00:00", "Z")
        payload = json.dumps({"ts": at, "values": {"temp": 20 + i, "humidity": 55}})
        messages.append(InboundTelemetry(kit.sensor.serial_number, payload, now))
    telemetry_ingest(messages=messages)
    page = support.get(f"{DEVICE_URL}{kit.sensor.pk}/change/").content.decode()
    svg = _svg_text(page)
    assert 'data-window="1 h"' in svg and "<strong>1h</strong>" in page
    temp_line = re.search(r'class="line" points="([^"]+)"', _panel(svg, "temp"))
    assert temp_line is not None
    xs = [float(p.split(",")[0]) for p in temp_line.group(1).split()]
    assert max(xs) - min(xs) > CHART_WIDTH / 4  # a third of the plot; a day's chart: 1/72
    humidity = _panel(svg, "humidity")
    frame = re.search(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', humidity)
    assert frame is not None
    top, height = float(frame.group(1)), float(frame.group(2))
    line = re.search(r'class="line" points="([^"]+)"', humidity)
    assert line is not None
    ys = {float(p.split(",")[1]) for p in line.group(1).split()}
    assert len(ys) == 1 and top + 5 < ys.pop() < top + height - 5  # across, off the frame
    temp = _panel(svg, "temp")
    assert ">temp (°C)</text>" in temp and ">24 °C</text>" in temp and ">20 °C</text>" in temp
    times = re.findall(
        r'<text class="time" x="([\d.]+)" y="[\d.]+" font-size="10" '
        r'text-anchor="(\w+)">',
        svg,
    )
    assert times[0][1] == "start" and times[-1][1] == "end"
    assert all(0 <= float(x) <= CHART_WIDTH for x, _ in times)
    asked = support.get(f"{DEVICE_URL}{kit.sensor.pk}/change/", {"chart": "24h"}).content
    assert 'data-window="24 h"' in asked.decode()


def test_device_chart_marks_the_commands_sent(support: Client) -> None:
    (kit,) = _kits(1)
    intent = dispatch(make_intent(kit))
    svg = _svg(support.get(f"{DEVICE_URL}{kit.actuator.pk}/change/"))
    io1 = re.search(r'data-endpoint="io1".*?</g>', svg, re.S)
    assert io1 is not None and f"command #{intent.pk} → true (dispatched)" in io1.group(0)
    assert svg.count('class="mark"') == 1


def _retrying(tenant: Tenant) -> DeviceCommand:
    tenant.kit.rule()
    intent = time_out(dispatch(make_intent(tenant.kit)))
    assert intent.status == CommandStatus.RETRYING
    return intent


def test_diagnostics_page_for_a_superuser_shows_every_organisation(
    support: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    for tenant in tenants:
        _retrying(tenant)
    page = support.get(DIAGNOSTICS_URL)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Commands retrying (2)" in text and "alpha-relay" in text and "beta-relay" in text
    assert "Devices with the most ack timeouts" in text
    assert f'href="{DIAGNOSTICS_URL}"'.encode() in support.get(INTENT_URL).content


def test_diagnostics_page_is_scoped_and_needs_the_command_permission(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    mine, _theirs = _retrying(alpha), _retrying(beta)
    client.login(username="alpha", password="pw")
    assert client.get(DIAGNOSTICS_URL).status_code == 403
    alpha.user.user_permissions.add(Permission.objects.get(codename="view_devicecommand"))
    text = client.get(DIAGNOSTICS_URL).content.decode()
    assert "Commands retrying (1)" in text and "alpha-relay" in text
    assert "beta-relay" not in text
    assert f"{INTENT_URL}{mine.pk}/change/" in text
    client.logout()
    anonymous = client.get(DIAGNOSTICS_URL)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
