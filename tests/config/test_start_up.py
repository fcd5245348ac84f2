"""Start-up under each settings module, as a deployment starts it (subprocesses): production
refuses to run without its secrets (one line naming the variable, from manage.py, wsgi and
gunicorn, celery), ``check --deploy`` passes on the production defaults, and the development
settings run on keys of their own, never on a public one."""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path

import pytest

from config.env import local_secret
from tests.config.entry_points import (
    BIN,
    CELERY_WORKER,
    MANAGE_CHECK,
    WSGI_IMPORT,
    env_clean,
    env_production,
    one_line_naming,
    run,
)


@pytest.mark.parametrize("argv", [MANAGE_CHECK, WSGI_IMPORT, CELERY_WORKER], ids=str)
def test_production_without_a_secret_key_refuses_to_start_naming_it(argv: list[str]) -> None:
    env = env_production()
    del env["DJANGO_SECRET_KEY"]
    line = one_line_naming(run(argv, env), "DJANGO_SECRET_KEY")
    assert "is not set" in line


@pytest.mark.parametrize("variable", ["DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "MQTT_URL"])
@pytest.mark.parametrize("argv", [MANAGE_CHECK, CELERY_WORKER], ids=str)
def test_production_without_a_server_refuses_to_start_naming_it(
    argv: list[str], variable: str
) -> None:
    """No embedded fallback in production: each unset server is one line naming it, and none
    of the other URLs' passwords."""
    env = env_production(
        DATABASE_URL="postgres://farm:DbPw@127.0.0.1:5432/farm",
        CELERY_BROKER_URL="amqp://farm:BrokerPw@127.0.0.1:5672//",
        REDIS_URL="redis://:CachePw@127.0.0.1:6379/0",
        MQTT_URL="mqtt://farm-backend:MqttPw@127.0.0.1:1885",
    )
    del env[variable]
    line = one_line_naming(run(argv, env), variable)
    assert "is not set" in line and "embedded" in line
    assert not any(pw in line for pw in ("DbPw", "BrokerPw", "CachePw", "MqttPw"))


def test_the_wsgi_app_exits_with_gunicorns_app_load_status_so_gunicorn_stops() -> None:
    env = env_production()
    del env["DJANGO_SECRET_KEY"]
    assert run(WSGI_IMPORT, env).returncode == 4
    gunicorn = [str(BIN / "gunicorn"), "config.wsgi", "--bind", "127.0.0.1:0", "--workers", "1"]
    gunicorn.append("--no-control-socket")  # no socket shared with another gunicorn here
    proc = run(gunicorn, env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("DJANGO_SECRET_KEY is not set") == 1


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DJANGO_SECRET_KEY", "change-me"),
        ("DJANGO_SECRET_KEY", "django-insecure-" + "x1y2z3" * 10),
        ("WEBHOOK_SECRET_KEY", "short"),
    ],
)
def test_production_refuses_a_weak_secret_without_printing_it(variable: str, value: str) -> None:
    line = one_line_naming(run(MANAGE_CHECK, env_production(**{variable: value})), variable)
    assert value not in line


def test_production_refuses_to_start_without_a_webhook_key() -> None:
    env = env_production()
    del env["WEBHOOK_SECRET_KEY"]
    assert "is not set" in one_line_naming(run(MANAGE_CHECK, env), "WEBHOOK_SECRET_KEY")


def test_check_deploy_finds_nothing_on_the_production_defaults() -> None:
    proc = run([*MANAGE_CHECK, "--deploy", "--fail-level", "WARNING"], env_production())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues" in proc.stdout


PRINT_KEYS = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.SECRET_KEY); print(s.WEBHOOK_SECRET_KEY)"
)


def test_development_settings_start_with_no_key_on_a_key_of_their_own() -> None:
    """``make demo`` and ``make up`` set no key: dev makes one per checkout, never public."""
    proc = run(
        [sys.executable, "-c", PRINT_KEYS], env_clean(DJANGO_SETTINGS_MODULE="config.settings.dev")
    )
    assert proc.returncode == 0, proc.stderr
    secret_key, webhook_key = proc.stdout.split()
    assert len(secret_key) >= 50 and len(webhook_key) >= 50 and secret_key != webhook_key
    assert "insecure" not in secret_key
    assert run(MANAGE_CHECK, env_clean()).returncode == 0


def test_a_local_secret_is_made_once_private_and_shared(tmp_path: Path) -> None:
    path = tmp_path / "var" / "key"
    first = local_secret(path)
    assert local_secret(path) == first and len(first) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["key"]  # no draft left behind
    shutil.rmtree(path.parent)
    assert local_secret(path) != first
