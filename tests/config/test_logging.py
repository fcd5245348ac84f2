"""Structured logs (docs/spec.md §9): every line is one JSON object carrying the correlation keys an
operator searches by, whether they came as ``extra=`` or were bound for a task's run."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from config.celery import app as celery_app
from config.logging import logging_settings

ROOT = Path(__file__).resolve().parent.parent.parent
PROBE_TASK = "tests.log_probe"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The production formatter writing into a buffer, root at INFO for the test's length."""
    options = dict(logging_settings(fmt="json", level="INFO")["formatters"]["structured"])
    factory = options.pop("()")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(factory(**options))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def parsed(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_no_line_shows_a_url_password_whatever_logged_it(json_lines) -> None:
    logger = logging.getLogger("kombu.connection")
    logger.warning("cannot connect to %s", "redis://:TopSecretPw@10.0.0.9:6379/1")
    try:
        raise ConnectionError("amqp://farm:TopSecretPw@rabbit:5672// refused")
    except ConnectionError:
        logger.exception("giving up", extra={"url": "postgres://farm:TopSecretPw@db/farm"})

    text = json_lines.getvalue()
    assert "TopSecretPw" not in text
    first, second = parsed(json_lines)
    assert first["event"] == "cannot connect to redis://:***@10.0.0.9:6379/1"
    assert second["url"] == "postgres://farm:***@db/farm"
    assert "amqp://farm:***@rabbit:5672// refused" in second["exception"]


def test_a_stdlib_call_with_extra_keys_is_one_json_line_carrying_them(json_lines) -> None:
    logging.getLogger("automation.services.commands").warning(
        "intent %s sent", 7, extra={"commandIntentId": 7, "deviceCommandId": "dc-7"}
    )

    [line] = parsed(json_lines)
    assert line["event"] == "intent 7 sent"
    assert line["level"] == "warning"
    assert line["logger"] == "automation.services.commands"
    assert line["timestamp"].endswith("Z")
    assert line["commandIntentId"] == 7
    assert line["deviceCommandId"] == "dc-7"


def test_bound_keys_reach_stdlib_and_structlog_lines_until_unbound(json_lines) -> None:
    with structlog.contextvars.bound_contextvars(serialNumber="SN-1"):
        logging.getLogger("devices.mqtt.bridge").warning("oversized payload")
        structlog.get_logger("devices.mqtt.bridge").warning("handed off", deviceId=3)
    logging.getLogger("devices.mqtt.bridge").warning("after the message")

    first, second, after = parsed(json_lines)
    assert first["serialNumber"] == "SN-1"
    assert second["serialNumber"] == "SN-1"
    assert second["deviceId"] == 3
    assert second["event"] == "handed off"
    assert "serialNumber" not in after


@pytest.fixture
def probe_task() -> Iterator[Any]:
    """A task that logs one line; unregistered afterwards so route checks stay exact."""

    @celery_app.task(name=PROBE_TASK, shared=False)
    def log_probe(rule_id: int) -> None:
        logging.getLogger("automation.tasks").warning("evaluating", extra={"ruleId": rule_id})

    try:
        yield log_probe
    finally:
        celery_app.tasks.unregister(PROBE_TASK)


def test_a_task_run_logs_with_its_name_and_id_bound(json_lines, probe_task) -> None:
    result = probe_task.apply(args=[11], task_id="task-11")
    logging.getLogger("automation.tasks").warning("outside any task")

    assert result.successful()
    inside = next(line for line in parsed(json_lines) if line["event"] == "evaluating")
    assert inside["taskName"] == PROBE_TASK
    assert inside["taskId"] == "task-11"
    assert inside["ruleId"] == 11
    outside = next(line for line in parsed(json_lines) if line["event"] == "outside any task")
    assert "taskName" not in outside


@pytest.mark.parametrize(("variable", "value"), [("LOG_FORMAT", "xml"), ("LOG_LEVEL", "LOUD")])
def test_a_malformed_log_setting_stops_start_up_naming_it(variable, value) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "MQTT_URL"}}
    env[variable] = value
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{variable}={value!r} is invalid" in proc.stderr


def test_a_process_started_with_defaults_writes_json_to_stderr() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"LOG_FORMAT", "DJANGO_DEBUG"}}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('events').error('dead letter', extra={'eventId': 'e-1'})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert proc.returncode == 0, proc.stderr
    [line] = [json.loads(raw) for raw in proc.stderr.splitlines()]
    assert line["eventId"] == "e-1"
    assert line["level"] == "error"
