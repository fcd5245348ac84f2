"""The API as an integrator meets it: a Python client generated with openapi-python-client
from the live ``/api/schema/``, signed in with the API key the way the schema's security
scheme says (no header set by hand), then a farm provisioned and operated, and its readings
exported as CSV, through that client only (``tests/config/client_flow.py``). The generator
and the client run in their own venv (``.venv-codegen``, built by ``make setup``): its pins
cannot live beside the product's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from django.contrib.auth.models import User

from common.accounts.services import api_token_issue

ROOT = Path(__file__).resolve().parents[2]
CODEGEN = ROOT / ".venv-codegen" / "bin"
FLOW = Path(__file__).with_name("client_flow.py")
GENERATE_TIMEOUT_S = 120
FLOW_TIMEOUT_S = 120


def _generate(schema: bytes, workdir: Path) -> Path:
    """The client package ``farm_client`` generated into ``workdir``; its directory."""
    (workdir / "schema.json").write_bytes(schema)
    (workdir / "config.yaml").write_text(
        "project_name_override: farm-client\npackage_name_override: farm_client\n"
    )
    env = {**os.environ, "PATH": f"{CODEGEN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [
            str(CODEGEN / "openapi-python-client"),
            "generate",
            "--path", "schema.json",
            "--config", "config.yaml",
            "--meta", "none",
            "--output-path", "farm_client",
        ],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Unable to" not in done.stdout + done.stderr, done.stdout + done.stderr
    return workdir


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_provisions_and_operates_a_farm(
    live_server: Any, tmp_path: Path
) -> None:
    if not (CODEGEN / "openapi-python-client").exists():
        pytest.fail("the client generator is missing: run make setup (it builds .venv-codegen)")
    admin = User.objects.create_superuser("integrator", "i@example.com", "pw")
    token = api_token_issue(user=admin).key
    with urlopen(f"{live_server.url}/api/schema/?format=json", timeout=10) as answer:
        schema = answer.read()
    workdir = _generate(schema, tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(workdir),
        "API_URL": live_server.url,
        "API_TOKEN": token,
    }
    done = subprocess.run(
        [str(CODEGEN / "python"), str(FLOW)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=FLOW_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["invalid_zone"] == {"code": "invalid", "fields": ["time_zone"]}
    assert seen["rule_target_value"] is True
    assert seen["telemetry_kept"] == 1
    assert seen["timeline_entries"] >= 1
    assert seen["deleted_rule"] == "not_found"
    assert seen["export"] == {
        "header": ["time_utc", "time_local", "serial", "endpoint", "value"],
        "rows": ["+07:00 GH-0001 temp 35"],  # the farm's Asia/Ho_Chi_Minh time
    }
    assert seen["series_formats"] == ["csv", "json"]
    first, second = seen["pages"]
    assert len(first) == len(second) == 1 and first != second
    assert {"commands_list", "farms_list", "rules_list", "contacts_list", "rollouts_list"} <= set(
        seen["lists"]
    )
    assert seen["rollout"] == {"states": ["running", "paused"], "targets": 1}
