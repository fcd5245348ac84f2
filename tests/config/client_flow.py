"""An integrator's first day, through a client generated from the live schema only.

Run by ``tests/config/test_generated_client.py`` with the generator's interpreter and the
generated package ``farm_client`` on its path (never imported by pytest: it needs no Django),
in the directory that holds the schema the client was generated from: the client signs in
with the security scheme that schema declares, as an integrator's would.
The client raises on any status the schema does not list for an operation, and every answer
must parse into the generated model named for it. Prints one JSON object of what it saw.
"""

from __future__ import annotations

import csv
import datetime
import importlib
import io
import json
import os
import pkgutil
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import farm_client.api
from farm_client import AuthenticatedClient
from farm_client.api.commands import commands_list, commands_timeline
from farm_client.api.contacts import contacts_create
from farm_client.api.devices import devices_create
from farm_client.api.endpoints import endpoint_command, endpoints_list
from farm_client.api.farms import farms_create
from farm_client.api.organizations import organizations_create
from farm_client.api.profiles import profiles_create
from farm_client.api.readings import readings_export
from farm_client.api.rollouts import rollouts_create, rollouts_pause, rollouts_retrieve
from farm_client.api.rules import rules_create, rules_destroy, rules_retrieve
from farm_client.api.telemetry import telemetry_ingest
from farm_client.api.user_messages import user_messages_create
from farm_client.models import (
    ContactCreateRequest,
    ContactWithSecret,
    DeviceCreateRequest,
    DeviceProfile,
    Error,
    Farm,
    FarmCreateRequest,
    IngestResult,
    ManualCommand,
    ManualCommandRequest,
    Organization,
    OrganizationRequest,
    PaginatedCommandList,
    PaginatedInstanceEndpointList,
    ProfileCreateRequest,
    ProvisionedDevice,
    Rollout,
    RolloutActRequest,
    RolloutCreateRequest,
    Rule,
    RuleRequest,
    TelemetryBatchRequest,
    Timeline,
    UserMessage,
    UserMessageRequest,
)
from farm_client.models.endpoints_series_format import EndpointsSeriesFormat
from farm_client.types import Response

SERIAL = "GH-0001"


def parsed(response: Response[Any], status: int, model: type) -> Any:
    """The answer's body as ``model``, after checking its status."""
    assert response.status_code == status, (response.status_code, response.content[:400])
    assert isinstance(response.parsed, model), (model, type(response.parsed))
    return response.parsed


def provision(client: AuthenticatedClient, seen: dict[str, Any]) -> dict[str, int]:
    """Step 1: an organisation, a farm (after a typed 400), a profile with two endpoints,
    a device, a rule, an external contact and a user message."""
    org = parsed(
        organizations_create.sync_detailed(client=client, body=OrganizationRequest("North Co")),
        201,
        Organization,
    )
    bad = FarmCreateRequest(organization=org.id, name="North", time_zone="Mars/Olympus")
    error = parsed(farms_create.sync_detailed(client=client, body=bad), 400, Error)
    seen["invalid_zone"] = {"code": error.code, "fields": sorted(error.fields.to_dict())}
    body = FarmCreateRequest(organization=org.id, name="North", time_zone="Asia/Ho_Chi_Minh")
    farm = parsed(farms_create.sync_detailed(client=client, body=body), 201, Farm)
    profile_body = ProfileCreateRequest.from_dict(
        {
            "organization": org.id,
            "name": "Box v1",
            "endpoints": [
                {"key": "temp", "data_type": "number"},
                {"key": "io1", "data_type": "bool", "writable": True, "rpc_method": "setIO"},
            ],
        }
    )
    profile = parsed(
        profiles_create.sync_detailed(client=client, body=profile_body), 201, DeviceProfile
    )
    device_body = DeviceCreateRequest(farm=farm.id, profile=profile.id, serial_number=SERIAL)
    device = parsed(
        devices_create.sync_detailed(client=client, body=device_body), 201, ProvisionedDevice
    )
    endpoints = parsed(
        endpoints_list.sync_detailed(client=client, device=device.id),
        200,
        PaginatedInstanceEndpointList,
    )
    ids = {e.key: e.id for e in endpoints.results}
    rule_body = RuleRequest.from_dict(
        {
            "farm": farm.id,
            "name": "Vent",
            "trigger_endpoint": ids["temp"],
            "operator": "gt",
            "threshold_value": 30,
            "target_endpoint": ids["io1"],
            "target_value": True,
        }
    )
    rule = parsed(rules_create.sync_detailed(client=client, body=rule_body), 201, Rule)
    seen["rule_target_value"] = rule.target_value  # JSON true, not the string "True"
    contact_body = ContactCreateRequest(farm=farm.id, name="Agronomist", email="ag@example.com")
    parsed(contacts_create.sync_detailed(client=client, body=contact_body), 201, ContactWithSecret)
    message_body = UserMessageRequest.from_dict(
        {
            "farm": farm.id,
            "subject": "Check the vents",
            "text": "Before the storm.",
            "channels": ["inbox"],
            "starts_on": (datetime.date.today() + datetime.timedelta(days=1)).isoformat(),
            "send_time": "08:00",
        }
    )
    parsed(user_messages_create.sync_detailed(client=client, body=message_body), 201, UserMessage)
    return {"farm": farm.id, "profile": profile.id, "rule": rule.id, **ids}


def operate(client: AuthenticatedClient, ids: dict[str, int], seen: dict[str, Any]) -> None:
    """Steps 2 to 4: telemetry, two manual commands and a timeline, the rule deleted."""
    now = datetime.datetime.now(datetime.UTC).isoformat()
    batch = TelemetryBatchRequest.from_dict(
        {"messages": [{"serial": SERIAL, "payload": {"ts": now, "values": {"temp": 35}}}]}
    )
    kept = parsed(telemetry_ingest.sync_detailed(client=client, body=batch), 202, IngestResult)
    seen["telemetry_kept"] = kept.telemetry
    commands = []
    for value in (True, False):
        body = ManualCommandRequest(value=value, reason="checking the vent")
        made = parsed(
            endpoint_command.sync_detailed(ids["io1"], client=client, body=body), 201, ManualCommand
        )
        commands.append(made.command.id)
    timeline = parsed(commands_timeline.sync_detailed(commands[-1], client=client), 200, Timeline)
    seen["timeline_entries"] = len(timeline.entries)
    assert rules_destroy.sync_detailed(ids["rule"], client=client).status_code == 204
    gone = parsed(rules_retrieve.sync_detailed(ids["rule"], client=client), 404, Error)
    seen["deleted_rule"] = gone.code


def export(client: AuthenticatedClient, ids: dict[str, int], seen: dict[str, Any]) -> None:
    """Step 4b: the farm's readings of the last hour as CSV, and the series' CSV format."""
    now = datetime.datetime.now(datetime.UTC)
    answer = readings_export.sync_detailed(
        client=client,
        farm=ids["farm"],
        from_=now - datetime.timedelta(hours=1),
        to=now + datetime.timedelta(minutes=1),
    )
    text = parsed(answer, 200, str)
    assert answer.headers["content-type"].startswith("text/csv"), answer.headers
    header, *rows = csv.reader(io.StringIO(text))
    lines = [" ".join([row[1][-6:], *row[2:]]) for row in rows]  # the local offset, the rest
    seen["export"] = {"header": header, "rows": lines}
    seen["series_formats"] = sorted(f.value for f in EndpointsSeriesFormat)


def roll_out(client: AuthenticatedClient, ids: dict[str, int], seen: dict[str, Any]) -> None:
    """Step 5: a rollout of the relay's io1 over the farm, read back, then paused."""
    body = RolloutCreateRequest.from_dict(
        {
            "name": "Vents shut",
            "farm_ids": [ids["farm"]],
            "profile_id": ids["profile"],
            "endpoint_key": "io1",
            "value": False,
            "reason": "storm warning",
            "abort_criteria": [{"outcome": "failed", "min_finished": 1, "threshold_pct": 50}],
        }
    )
    made = parsed(rollouts_create.sync_detailed(client=client, body=body), 201, Rollout)
    shown = parsed(rollouts_retrieve.sync_detailed(made.id, client=client), 200, Rollout)
    assert shown.counters.to_dict() == made.counters.to_dict(), (shown, made)
    pause = RolloutActRequest(reason="checking the canary")
    paused = parsed(rollouts_pause.sync_detailed(made.id, client=client, body=pause), 200, Rollout)
    assert (str(made.state), str(paused.state)) == ("running", "paused")
    seen["rollout"] = {
        "states": [str(made.state), str(paused.state)],
        "targets": sum(made.counters.to_dict().values()),
    }


def lists(client: AuthenticatedClient, seen: dict[str, Any]) -> None:
    """Step 6: every list operation the client has, and a cursor followed to page two."""
    listed = []
    for tag in pkgutil.iter_modules(farm_client.api.__path__):
        package = importlib.import_module(f"farm_client.api.{tag.name}")
        for operation in pkgutil.iter_modules(package.__path__):
            if operation.name.endswith("_list"):
                module = importlib.import_module(f"{package.__name__}.{operation.name}")
                response = module.sync_detailed(client=client)
                assert response.status_code == 200, (operation.name, response.content[:400])
                assert response.parsed is not None and not isinstance(response.parsed, Error)
                listed.append(operation.name)
    seen["lists"] = sorted(listed)
    first = parsed(
        commands_list.sync_detailed(client=client, page_size=1), 200, PaginatedCommandList
    )
    cursor = parse_qs(urlsplit(first.next_).query)["cursor"][0]
    second = parsed(
        commands_list.sync_detailed(client=client, page_size=1, cursor=cursor),
        200,
        PaginatedCommandList,
    )
    seen["pages"] = [[c.id for c in first.results], [c.id for c in second.results]]


def signed_in(schema: dict[str, Any], key: str) -> AuthenticatedClient:
    """A client that presents ``key`` as the schema says: the scheme every operation asks
    for first, an API key in a header whose value the scheme describes as ``<word> <key>``."""
    operations = [o for item in schema["paths"].values() for o in item.values()]
    (name,) = {next(iter(o["security"][0])) for o in operations}
    scheme = schema["components"]["securitySchemes"][name]
    assert (scheme["type"], scheme["in"]) == ("apiKey", "header"), scheme
    word = re.search(r"`(\S+) <key>`", scheme["description"])
    assert word is not None, scheme["description"]
    return AuthenticatedClient(
        base_url=os.environ["API_URL"],
        token=key,
        prefix=word[1],
        auth_header_name=scheme["name"],
        raise_on_unexpected_status=True,
    )


def main() -> None:
    schema = json.loads(Path("schema.json").read_text())  # the one the client was built from
    client = signed_in(schema, os.environ["API_TOKEN"])
    seen: dict[str, Any] = {}
    with client:
        ids = provision(client, seen)
        operate(client, ids, seen)
        export(client, ids, seen)
        roll_out(client, ids, seen)
        lists(client, seen)
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
