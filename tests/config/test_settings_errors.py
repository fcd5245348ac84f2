"""A settings error never shows a credential and is one line, not a traceback: every
URL-parsing error masks the value's password, whichever entry point started (manage.py,
wsgi, celery), and ``credentials_masked`` masks any text."""

from __future__ import annotations

import pytest

from config.env import SettingError, credentials_masked, device_credentials_from_env
from tests.config.entry_points import (
    CELERY_WORKER,
    MANAGE_CHECK,
    PASSWORD,
    WSGI_IMPORT,
    env_clean,
    env_production,
    one_line_naming,
    run,
)

BAD_URLS = [
    ("DATABASE_URL", f"mysql://farm:{PASSWORD}@db.internal:3306/farm"),
    ("DATABASE_URL", f"postgres://farm:{PASSWORD}@db.internal:notaport/farm"),
    ("CELERY_BROKER_URL", f"kafka://:{PASSWORD}@broker:9092"),
    ("REDIS_URL", f"http://user:{PASSWORD}@cache:6379/0"),
    ("MQTT_URL", f"ws://bridge:{PASSWORD}@mqtt:80"),
    ("EMAIL_URL", f"imap://mail:{PASSWORD}@mail.example.org"),
]


@pytest.mark.parametrize(("variable", "value"), BAD_URLS)
def test_a_bad_url_is_one_masked_line_from_manage_py(variable: str, value: str) -> None:
    line = one_line_naming(run(MANAGE_CHECK, env_clean(**{variable: value})), variable)
    assert "is invalid" in line and PASSWORD not in line and "***" in line


@pytest.mark.parametrize("argv", [WSGI_IMPORT, CELERY_WORKER], ids=str)
def test_a_bad_url_is_one_masked_line_from_wsgi_and_celery(argv: list[str]) -> None:
    variable, value = BAD_URLS[0]
    line = one_line_naming(run(argv, env_production(**{variable: value})), variable)
    assert PASSWORD not in line and "mysql://farm:***@db.internal:3306/farm" in line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgres://farm:pw@db:5432/farm", "postgres://farm:***@db:5432/farm"),
        ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
        ("amqp://guest:p/w@d@rabbit//", "amqp://guest:***@rabbit//"),
        ("mqtt://device@broker:1883", "mqtt://device@broker:1883"),
        ("postgres://db/farm?sslmode=require&password=pw", "postgres://db/farm?sslmode=require&password=***"),
        ("broker redis://u:pw@h:1/0 is down", "broker redis://u:***@h:1/0 is down"),
    ],
)  # fmt: skip
def test_credentials_are_masked_in_any_text(text: str, shown: str) -> None:
    assert credentials_masked(text) == shown


def test_a_whole_value_is_masked_to_its_last_at_sign_whatever_it_holds() -> None:
    value = "farm:pa ss'w@rd@db/farm"  # no scheme, a space, a quote and an @ in the password
    assert credentials_masked(value, whole_value=True) == "farm:***@db/farm"


DYNSEC = "DEVICE_CREDENTIALS"


URL = "MQTT_DYNSEC_URL"
ADMIN = "farm-dynsec%2Fadmin"


@pytest.mark.parametrize(
    ("values", "variable", "why"),
    [
        ({DYNSEC: "passwd"}, DYNSEC, "expected none or dynsec"),
        ({DYNSEC: "dynsec"}, URL, "is not set"),
        ({URL: f"mqtt://{ADMIN}:{PASSWORD}@mqtt:1883"}, URL, "not dynsec"),
        ({DYNSEC: "dynsec", URL: f"mqtt://admin:{PASSWORD}@mqtt:1883"}, URL, "must contain '/'"),
        ({DYNSEC: "dynsec", URL: f"mqtt://farm-dynsec/admin:{PASSWORD}@mqtt"}, URL, "and password"),
        ({DYNSEC: "dynsec", URL: f"ws://{ADMIN}:{PASSWORD}@mqtt:1883"}, URL, "expected mqtt://"),
        ({DYNSEC: "dynsec", URL: f"mqtt://{ADMIN}@mqtt:1883"}, URL, "and password"),
    ],
)
def test_device_credentials_settings_are_checked_at_start(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], variable: str, why: str
) -> None:
    for name in (DYNSEC, "MQTT_DYNSEC_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as raised:
        device_credentials_from_env()
    message = str(raised.value)
    assert message.startswith(variable) and why in message and PASSWORD not in message


def test_dynsec_credentials_name_the_plugin_backend_and_the_admins_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DYNSEC, "DynSec")
    monkeypatch.setenv("MQTT_DYNSEC_URL", "mqtts://farm-dynsec%2Fadmin:p%40ss@mqtt.internal")
    backend, config = device_credentials_from_env()
    assert backend == "devices.mqtt.dynsec.DynsecCredentials"
    assert config is not None and (config.host, config.port, config.tls) == (
        "mqtt.internal",
        8883,
        True,
    )
    assert (config.username, config.password) == ("farm-dynsec/admin", "p@ss")
    assert "p@ss" not in repr(config)
    monkeypatch.delenv(DYNSEC)
    monkeypatch.delenv("MQTT_DYNSEC_URL")
    assert device_credentials_from_env() == ("", None)


def test_a_bad_device_credentials_setting_is_one_masked_line_from_manage_py() -> None:
    env = env_clean(
        DEVICE_CREDENTIALS="dynsec", MQTT_DYNSEC_URL=f"mqtt://admin:{PASSWORD}@mqtt:1883"
    )
    line = one_line_naming(run(MANAGE_CHECK, env), "MQTT_DYNSEC_URL")
    assert PASSWORD not in line and "mqtt://admin:***@mqtt:1883" in line
