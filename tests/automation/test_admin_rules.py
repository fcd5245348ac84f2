"""The rule form in the admin: endpoints picked by ``SERIAL · key`` from an autocomplete that
offers only the user's organisations, and values typed by the endpoint (a number, true/false,
one of the allowed values), each error on its field."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from automation.models import AutomationRule
from devices.models import DeviceProfileEndpoint
from tests.conftest import Tenant
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
RULE_URL = "/admin/automation/automationrule/"
AUTOCOMPLETE_URL = "/admin/autocomplete/"


def _form(kit: FarmKit, **overrides: Any) -> dict[str, Any]:
    form = {
        "farm": kit.farm.pk,
        "name": "vent",
        "trigger_endpoint": kit.temp.pk,
        "operator": "gt",
        "threshold_value": "30",
        "threshold_value_high": "",
        "target_endpoint": kit.io1.pk,
        "target_value": "true",
        "is_active": "on",
    }
    return form | overrides


def _errors(page: Any) -> dict[str, list[str]]:
    assert page.status_code == 200, page.status_code
    return {k: list(v) for k, v in page.context["adminform"].form.errors.items()}


def test_the_change_page_types_each_value_by_its_endpoint(support: Client) -> None:
    kit = make_farm(prefix="typed")
    rule = kit.rule(threshold_value=30, target_value=True)
    page = support.get(f"{RULE_URL}{rule.pk}/change/")
    html = page.content.decode()
    assert 'type="number" name="threshold_value" value="30"' in html
    form = page.context["adminform"].form
    assert [c[0] for c in form.fields["target_value"].choices] == ["true", "false"]
    assert form["target_value"].value() == "true"
    assert "admin-autocomplete" in html and "typed-relay · io1" in html  # the picked endpoint
    assert '<textarea name="target_value"' not in html


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"threshold_value": "warm"}, "threshold_value"),
        ({"operator": "between", "threshold_value_high": "hot"}, "threshold_value_high"),
        ({"target_value": "1"}, "target_value"),  # a bool endpoint: true or false
        ({"target_endpoint": "fan", "target_value": "150"}, "target_value"),  # max 100
        ({"target_endpoint": "mode", "target_value": "turbo"}, "target_value"),  # not allowed
        ({"operator": "between"}, "threshold_value_high"),  # a range needs its high end
    ],
)
def test_a_wrong_value_is_refused_on_its_field(
    support: Client, overrides: dict[str, Any], field: str
) -> None:
    kit = make_farm(prefix="bad")
    if "target_endpoint" in overrides:
        overrides["target_endpoint"] = getattr(kit, overrides["target_endpoint"]).pk
    errors = _errors(support.post(f"{RULE_URL}add/", _form(kit, **overrides)))
    assert list(errors) == [field], errors
    assert not AutomationRule.objects.exists()


def test_typed_values_are_saved_as_the_endpoint_takes_them(support: Client) -> None:
    kit = make_farm(prefix="good")
    form = _form(kit, target_endpoint=kit.fan.pk, target_value="40", threshold_value="30.5")
    assert support.post(f"{RULE_URL}add/", form).status_code == 302
    rule = AutomationRule.objects.get()
    assert rule.threshold_value == 30.5 and rule.target_value == 40
    assert isinstance(rule.target_value, int)
    form = _form(kit, target_endpoint=kit.mode.pk, target_value="manual", name="mode")
    assert support.post(f"{RULE_URL}add/", form).status_code == 302
    assert AutomationRule.objects.get(name="mode").target_value == "manual"
    edit = _form(kit, target_value="false", threshold_value="31")
    assert support.post(f"{RULE_URL}{rule.pk}/change/", edit).status_code == 302
    rule.refresh_from_db()
    assert rule.target_value is False and rule.target_endpoint_id == kit.io1.pk


def _autocomplete(client: Client, term: str) -> list[str]:
    page = client.get(
        AUTOCOMPLETE_URL,
        {
            "app_label": "automation",
            "model_name": "automationrule",
            "field_name": "target_endpoint",
            "term": term,
        },
    )
    assert page.status_code == 200, page.status_code
    return sorted(r["text"] for r in page.json()["results"])


def test_endpoint_autocomplete_offers_only_the_users_organisations(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, _beta = tenants
    codenames = ["view_automationrule", "add_automationrule", "change_automationrule"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.login(username="alpha", password="pw")
    assert (
        client.get(
            AUTOCOMPLETE_URL,
            {
                "app_label": "automation",
                "model_name": "automationrule",
                "field_name": "target_endpoint",
                "term": "io1",
            },
        ).status_code
        == 403
    )
    alpha.user.user_permissions.add(Permission.objects.get(codename="view_device"))
    assert _autocomplete(client, "io1") == ["alpha-relay · io1"]
    assert _autocomplete(client, "beta-relay") == []
    assert _autocomplete(client, "alpha-relay · fan") == ["alpha-relay · fan"]
    client.logout()
    User.objects.create_superuser("root", "r@example.com", "pw")
    client.login(username="root", password="pw")
    assert _autocomplete(client, "io1") == ["alpha-relay · io1", "beta-relay · io1"]


def test_the_list_and_the_form_read_operators_as_signs_and_values_with_units(
    support: Client,
) -> None:
    kit = make_farm(prefix="read")
    DeviceProfileEndpoint.objects.filter(pk=kit.temp.profile_endpoint_id).update(unit="°C")
    rule = kit.rule(operator="gt", threshold_value=30, target_value=False)
    kit.rule(name="band", operator="between", threshold_value=18, threshold_value_high=30.5)
    listing = support.get(RULE_URL).content.decode()
    assert '<td class="field-when">read-sensor · temp &gt; 30 °C</td>' in listing
    assert "between 18 °C and 30.5 °C" in listing
    assert '<td class="field-then">read-relay · io1 → false</td>' in listing
    assert ">Gt<" not in listing and "False" not in listing
    form = support.get(f"{RULE_URL}{rule.pk}/change/").context["adminform"].form
    assert dict(form.fields["operator"].choices)["gt"] == "> (greater than)"
    assert form.fields["threshold_value"].help_text == "a number of temp, in °C"
