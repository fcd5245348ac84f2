"""`make demo` as a user runs it: migrate, then the demo command in its own process, on the
embedded default or, when the real servers' variables are set, on them (a database of its
own). It must exit 0 with every invariant holding, show each lane it promises and end with
the next step, `make admin`, whose printed login then sees the demo's rows in the admin."""

from __future__ import annotations

import json
import re

from devtools.demo import DEMO_FARM
from devtools.demo_rollouts import NAME_PREFIX
from devtools.management.commands.demo import NEXT_STEP
from devtools.management.commands.demo_admin import ADMIN_LOGIN
from tests.devtools.conftest import DemoRun, manage

INVARIANT = re.compile(r"^(.+?)\s+(yes|NO)$", re.MULTILINE)


def test_the_demo_ends_with_every_invariant_holding(demo_ran: DemoRun) -> None:
    out = demo_ran.stdout
    invariants = dict(INVARIANT.findall(out.split("\nInvariants", 1)[1]))
    assert len(invariants) >= 10 and set(invariants.values()) == {"yes"}, invariants
    origins = out.split("Commands by origin", 1)[1].split("\n\n", 1)[0]
    for origin in ("manual", "rule", "schedule"):
        assert re.search(rf"^{origin}\s+\d+", origins, re.MULTILINE), origins
    assert re.search(r"^discarded\s+lower_priority\s+\d+", out, re.MULTILINE)
    assert re.search(r"^(email|inbox)\s+sent\s+1$", out, re.MULTILINE)
    assert re.search(r"^rule_schedule\s+completed\s+1", out, re.MULTILINE)
    assert re.search(r"^user_message\s+completed\s+1", out, re.MULTILINE)
    _assert_rollouts(out)
    assert out.rstrip().endswith(NEXT_STEP)
    _assert_the_admin_shows_the_demo(demo_ran.env)


# Targets per state of the completed run and the aborted one: the first relay is held by the
# operator (skipped), never_apply and wrong_value end uncertain, invalid_param failed; the
# aborted run's canary is the hardware_fault relay (failed) and one that applied, its two
# other targets skipped when the criterion tripped.
ROLLOUT_COUNTS = {
    "pending": (0, 0),
    "skipped": (1, 2),
    "applied": (4, 1),
    "failed": (1, 1),
    "uncertain": (2, 0),
}


def _assert_rollouts(out: str) -> None:
    table = out.split("\nRollouts over the relays' io1", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^state\s+#\d+ completed\s+#\d+ aborted$", table, re.MULTILINE), table
    for state, (completed, aborted) in ROLLOUT_COUNTS.items():
        assert re.search(rf"^{state}\s+{completed}\s+{aborted}$", table, re.MULTILINE), table
    assert re.search(r"skipped: manual_override 1$", table, re.MULTILINE), table
    assert re.search(r"skipped: aborted 2$", table, re.MULTILINE), table
    assert re.search(
        r"^#\d+ aborted by criterion failed ≥ 50% of ≥ 2 finished: 1 of 2 finished \(50\.0%\); "
        r"DEMO-R\d+ answered hardware_fault$",
        table,
        re.MULTILINE,
    ), table


# Run in the demo's environment with the printed login: each page the command printed, its
# status and whether it shows the demo's rows (a marker of each).
ADMIN_PROBE = """
import json, os
from django.test import Client
client = Client(HTTP_HOST="localhost")
logged_in = client.login(username=os.environ["ADMIN_LOGIN"], password=os.environ["ADMIN_PASSWORD"])
seen = {}
for path, marker in json.loads(os.environ["ADMIN_PAGES"]).items():
    response = client.get(path)
    seen[path] = [response.status_code, marker in response.content.decode()]
print(json.dumps({"logged_in": logged_in, "seen": seen}))
"""
ADMIN_MARKERS = {
    f"farm {DEMO_FARM}": DEMO_FARM,
    "devices": "DEMO-R01",
    "commands": "DEMO-R01",
    "rules": "Vent on 1",
    "rollouts": NAME_PREFIX,
}


def _assert_the_admin_shows_the_demo(env: dict[str, str]) -> None:
    made = manage(env, "demo_admin", "--no-serve", "--reset")  # the session may have made it
    assert made.returncode == 0, made.stderr[-2000:]
    password = re.search(rf"^login {ADMIN_LOGIN} / (\S+)", made.stdout, re.MULTILINE)
    assert password, made.stdout
    pages = dict(re.findall(r"^(\S+(?: \S+)*)\s+http://127\.0\.0\.1:\d+(/\S*)$", made.stdout, re.M))
    probe_env = env | {
        "ADMIN_LOGIN": ADMIN_LOGIN,
        "ADMIN_PASSWORD": password[1],
        "ADMIN_PAGES": json.dumps({pages[what]: marker for what, marker in ADMIN_MARKERS.items()}),
    }
    probe = manage(probe_env, "shell", "-c", ADMIN_PROBE)
    assert probe.returncode == 0, probe.stderr[-2000:]
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert result["logged_in"] is True
    assert all(seen == [200, True] for seen in result["seen"].values()), result["seen"]
