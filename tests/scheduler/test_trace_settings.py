"""Where the trace lives is configuration: the storage of its blobs (any Django storage
backend, an S3-compatible one through django-storages) and the database of its records. A
bad value stops start-up with one line naming the variable; options (which may hold keys)
are never echoed."""

from __future__ import annotations

import importlib.util

import pytest

from config.env import SettingError
from config.env_trace import trace_database_from_env, trace_storage_from_env
from tests.config.entry_points import MANAGE_CHECK, env_clean, one_line_naming, run


def test_the_default_is_the_file_system_under_media_root(monkeypatch) -> None:
    monkeypatch.delenv("SCHEDULER_TRACE_STORAGE_BACKEND", raising=False)
    monkeypatch.delenv("SCHEDULER_TRACE_STORAGE_OPTIONS", raising=False)
    assert trace_storage_from_env() == {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {},
    }


def test_a_backend_and_its_options_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SCHEDULER_TRACE_STORAGE_BACKEND", "django.core.files.storage.Storage")
    monkeypatch.setenv("SCHEDULER_TRACE_STORAGE_OPTIONS", '{"location": "/srv/traces"}')
    assert trace_storage_from_env()["OPTIONS"] == {"location": "/srv/traces"}


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("SCHEDULER_TRACE_STORAGE_BACKEND", "S3Storage", "expected module.Class"),
        ("SCHEDULER_TRACE_STORAGE_BACKEND", "no_such_package.s3.S3Storage", "not installed"),
        ("SCHEDULER_TRACE_STORAGE_OPTIONS", '["secret-key"]', "expected a JSON object"),
        ("SCHEDULER_TRACE_STORAGE_OPTIONS", '{"secret_key": ', "expected a JSON object"),
    ],
)
def test_a_bad_storage_setting_names_its_variable(monkeypatch, variable, value, why) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingError, match=why) as raised:
        trace_storage_from_env()
    assert str(raised.value).startswith(f"{variable}=") and raised.value.variable == variable
    assert "secret" not in str(raised.value)


def test_the_trace_database_must_be_a_configured_alias(monkeypatch) -> None:
    monkeypatch.delenv("SCHEDULER_TRACE_DATABASE", raising=False)
    assert trace_database_from_env({"default": {}}) == "default"
    monkeypatch.setenv("SCHEDULER_TRACE_DATABASE", "traces")
    assert trace_database_from_env({"default": {}, "traces": {}}) == "traces"
    with pytest.raises(SettingError, match="not a DATABASES alias"):
        trace_database_from_env({"default": {}})


def test_an_s3_backend_without_django_storages_installed_stops_start_up() -> None:
    """django-storages is the production image's choice: naming its backend where it is not
    installed fails at start, not at the first blob."""
    if importlib.util.find_spec("storages") is not None:
        pytest.skip("django-storages is installed here")
    env = env_clean(SCHEDULER_TRACE_STORAGE_BACKEND="storages.backends.s3.S3Storage")
    line = one_line_naming(run(MANAGE_CHECK, env), "SCHEDULER_TRACE_STORAGE_BACKEND")
    assert "storages.backends.s3 is not installed" in line
