"""Rendering: strict about names, escaping only where HTML, lossless about dates."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from notifications.services import RenderError, notification_render
from notifications.services.context import context_decode, context_encode, context_plain
from tests.notifications.conftest import write_template

WHEN = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def render(name, **context):
    return notification_render(
        template_name=name, context=context, locale="en", time_zone="Europe/Berlin"
    )


def test_text_is_not_escaped_html_is(templates):
    write_template(
        templates, "esc", subject_txt="A & B", body_txt="<{{ x }}>", body_html="<b>{{ x }}</b>"
    )
    rendered = render("esc", x="Tom & Jerry")
    assert rendered.subject == "A & B"
    assert rendered.body == "<Tom & Jerry>\n"
    assert rendered.body_html == "<b>Tom &amp; Jerry</b>"


def test_subject_is_one_line(templates):
    write_template(templates, "lines", subject_txt="  Due\n  {{ x }}\n", body_txt="b")
    assert render("lines", x="today").subject == "Due today"


def test_dates_use_the_zone_on_either_side_of_a_dst_change(templates):
    write_template(
        templates, "dst", subject_txt="s", body_txt="{{ a|date:'H:i T' }} {{ b|date:'H:i T' }}"
    )
    before = datetime(2026, 10, 24, 22, 0, tzinfo=UTC)  # 25 Oct starts in summer time
    after = datetime(2026, 10, 25, 12, 0, tzinfo=UTC)  # back to CET at 03:00 local
    assert render("dst", a=before, b=after).body == "00:00 CEST 13:00 CET\n"


@pytest.mark.parametrize(
    ("name", "reason"),
    [("../etc", "template_error"), ("a/b", "template_error"), ("", "template_error")],
)
def test_template_names_cannot_escape_the_folder(name, reason):
    with pytest.raises(RenderError) as caught:
        render(name)
    assert caught.value.reason == reason


def test_a_nested_missing_attribute_is_named(templates):
    write_template(templates, "nested", subject_txt="s", body_txt="{{ batch.name }}")
    with pytest.raises(RenderError, match=r"template_variable_missing: batch\.name"):
        render("nested", batch={"code": "B1"})


def test_an_unknown_time_zone_is_a_template_error(templates):
    write_template(templates, "tz", subject_txt="s", body_txt="b")
    with pytest.raises(RenderError, match="template_error"):
        notification_render(template_name="tz", context={}, locale="en", time_zone="Mars/Base")


def test_context_round_trips_tagged_values():
    value = {
        "at": WHEN,
        "on": date(2026, 1, 2),
        "n": Decimal("1.10"),
        "l": [1, "x", None],
        "d": {"deep": [WHEN]},
    }
    stored = context_encode(value)
    assert context_decode(stored) == value
    assert context_plain(stored)["at"] == "2026-10-25T00:30:00+00:00"
    with pytest.raises(ValueError, match=r"context\.bad"):
        context_encode({"bad": object()})
    with pytest.raises(ValueError, match="reserved"):
        context_encode({"__notify__": 1})
