"""The monitoring files in deploy/ (Prometheus alert rules and their promtool unit tests, the
scrape config, the Grafana dashboard) hold together: promtool accepts them, every metric name
they query is one /metrics exports, and every alert points at a runbook section that exists.
A dashboard panel or alert on a renamed metric would otherwise stay silent for ever."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "farm-core.json"
RUNBOOK = ROOT / "deploy" / "RUNBOOK.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)"
)

# The sample names each metric type exposes, from its family name (the parser strips _total).
SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
}
PROMQL_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"offset", "bool", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are neither functions, nor
    keywords, nor labels (in matchers or grouping clauses), nor durations."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\boffset\s+\S+", " ", text)
    return {
        name
        for name in _IDENTIFIER.findall(text)
        if name.lower() not in PROMQL_KEYWORDS and not re.fullmatch(r"\d\w*", name)
    }


def test_the_expression_parser_finds_metric_names_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, hop) (rate(a_bucket{hop=~"x|y"}[$__rate_interval])))'
        " / ignoring(x) group_left(y) b and on (z) (c offset 1h or vector(0)) > 0.5"
        " unless absent(up) and 2 * d:recorded_rate"
    )
    assert promql_metric_names(expr) == {"a_bucket", "b", "c", "up", "d:recorded_rate"}


@pytest.fixture
def exported_names(client: Client, db: None, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every sample name /metrics can expose: the families it declares (a counter with labels
    and no count yet is declared all the same), expanded by type."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    response = client.get("/metrics")
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names |= {family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))}
    assert "farm_command_stage_seconds_bucket" in names and "farm_backlog" in names
    return names


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard_panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return [p for p in panels if p["type"] != "row"]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def runbook_anchors() -> set[str]:
    return {
        github_anchor(line.lstrip("#"))
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("#")
    }


def test_alerts_query_only_exported_metrics(exported_names: set[str]) -> None:
    rules = alert_rules()
    assert rules
    for rule in rules:
        used = promql_metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= exported_names, (rule["alert"], used - exported_names)


def test_dashboard_panels_query_only_exported_metrics(exported_names: set[str]) -> None:
    panels = dashboard_panels()
    assert len(panels) >= 10
    for panel in panels:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, panel["title"]
        for expr in exprs:
            used = promql_metric_names(expr)
            assert used and used <= exported_names, (panel["title"], used - exported_names)


def test_the_dashboard_imports_with_a_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    panels = dashboard_panels()
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        sources = [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]
        assert all(s == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"} for s in sources)


def test_every_alert_is_annotated_and_points_at_its_runbook_section() -> None:
    anchors = runbook_anchors()
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    for rule in alert_rules():
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        page, _, anchor = annotations["runbook"].partition("#")
        assert page == "deploy/RUNBOOK.md" and anchor in anchors, rule["alert"]
        assert anchor == github_anchor(rule["alert"]), rule["alert"]


def test_every_alert_the_runbook_names_has_a_rule() -> None:
    """The runbook names an alert with a heading of the alert's name (``### FarmX``)."""
    named = set(re.findall(r"^#+\s+(Farm[A-Z]\w+)\s*$", RUNBOOK.read_text(), re.MULTILINE))
    assert named and named == {rule["alert"] for rule in alert_rules()}


def test_the_unit_tests_make_every_alert_fire_and_stay_quiet() -> None:
    tests = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for name in {rule["alert"] for rule in alert_rules()}:
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name} never fires"
        assert any(not case["exp_alerts"] for case in mine), f"{name} has no quiet case"


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@needs_promtool
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@needs_promtool
def test_promtool_accepts_the_scrape_config(tmp_path: Path) -> None:
    """Checked in full (rule files, the token file) on a copy whose token file exists."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    (farm,) = [job for job in config["scrape_configs"] if job["job_name"] == "farm"]
    assert farm["metrics_path"] == "/metrics"
    assert farm["authorization"]["type"] == "Bearer"
    token = tmp_path / "farm-metrics-token"
    token.write_text("not-a-real-token\n")
    farm["authorization"]["credentials_file"] = str(token)
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
