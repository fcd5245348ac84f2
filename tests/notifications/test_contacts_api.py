"""External contacts and their channel preferences over the API: an admin of the farm's
organisation writes, a viewer reads, another organisation finds nothing (404). A webhook
contact's signing secret is in the create's and the rotation's answer only: never on a read,
a list or a replay by Idempotency-Key, and never stored; a webhook URL no webhook may go to
is a 400 on ``webhook_url``. Deleting a contact deactivates it; a preference holding the
recipient's own opt-out is not deleted."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from common.models import ApiIdempotencyRecord, MemberRole, OrganizationMember
from notifications.models import ChannelPreference, ExternalContact
from notifications.services.recipients import recipients_resolve
from notifications.webhook_secrets import webhook_secret_recompute
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.notifications.factories import ChannelPreferenceFactory, ExternalContactFactory

pytestmark = pytest.mark.django_db
HOOK = "https://93.184.216.34/hooks/farm"  # a public address: nothing to resolve
CONTACTS = "/api/v1/contacts/"
PREFERENCES = "/api/v1/channel-preferences/"


def _hook_body(tenant: Tenant, **extra: Any) -> dict[str, Any]:
    return {"farm": tenant.kit.farm.pk, "name": "Integrator", "webhook_url": HOOK, **extra}


def _signs_with(contact_id: int, secret: str) -> bool:
    contact = ExternalContact.objects.get(pk=contact_id)
    current = webhook_secret_recompute(
        contact_id=contact.pk,
        salt=contact.webhook_secret_salt,
        key_id=contact.webhook_secret_key_id,
    )
    return current == secret


def _fields(response: Any) -> list[str]:
    assert response.status_code == 400, response.content
    return list(response.json()["fields"])


def test_a_webhook_secret_is_shown_once(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    made = client.post(CONTACTS, _hook_body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    assert made.status_code == 201, made.content
    assert made["Cache-Control"] == "no-store"
    body = made.json()
    secret = body["webhook_secret"]
    assert secret.startswith("whsec_") and body["has_webhook_secret"] is True
    assert _signs_with(body["id"], secret)

    # Never again: not on a read, a list, a replay, nor in the stored replay.
    reads = [client.get(f"{CONTACTS}{body['id']}/"), client.get(CONTACTS)]
    replay = client.post(CONTACTS, _hook_body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    assert replay["Idempotent-Replayed"] == "true" and replay.json()["webhook_secret"] is None
    for response in [*reads, replay]:
        assert response.status_code in (200, 201) and secret.encode() not in response.content
    assert "webhook_secret" not in reads[0].json()
    assert secret not in str(ApiIdempotencyRecord.objects.get(key="c-1").response_body)
    assert ExternalContact.objects.count() == 1


def test_rotating_a_secret_shows_the_new_one_once(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    made = client.post(CONTACTS, _hook_body(alpha), format="json").json()
    url = f"{CONTACTS}{made['id']}/rotate-secret/"
    rotated = client.post(url, format="json", HTTP_IDEMPOTENCY_KEY="r-1")
    assert rotated.status_code == 200, rotated.content
    assert rotated["Cache-Control"] == "no-store"
    new = rotated.json()["webhook_secret"]
    assert new.startswith("whsec_") and new != made["webhook_secret"]
    assert _signs_with(made["id"], new) and not _signs_with(made["id"], made["webhook_secret"])
    replay = client.post(url, format="json", HTTP_IDEMPOTENCY_KEY="r-1")
    assert replay.json()["webhook_secret"] is None and _signs_with(made["id"], new)
    assert new not in str(ApiIdempotencyRecord.objects.get(key="r-1").response_body)


def test_an_email_contact_has_no_secret_to_rotate(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    body = {"farm": alpha.kit.farm.pk, "name": "Vet", "email": "vet@example.org"}
    made = client.post(CONTACTS, body, format="json")
    assert made.status_code == 201 and made.json()["webhook_secret"] is None
    rotated = client.post(f"{CONTACTS}{made.json()['id']}/rotate-secret/", format="json")
    assert rotated.status_code == 409 and rotated.json()["code"] == "no_webhook_url"
    assert ExternalContact.objects.get().webhook_secret_salt == ""


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",  # loopback
        "https://10.1.2.3/hook",  # private
        "https://[::ffff:192.168.1.1]/hook",  # private, IPv4-mapped
        "ftp://93.184.216.34/hook",
        "not a url",
    ],
)
def test_a_refused_webhook_url_is_a_400_on_the_field(
    tenants: tuple[Tenant, Tenant], url: str
) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    assert _fields(client.post(CONTACTS, _hook_body(alpha, webhook_url=url), format="json")) == [
        "webhook_url"
    ]
    assert not ExternalContact.objects.exists()
    contact = ExternalContactFactory(farm=alpha.kit.farm, webhook_url=HOOK)
    patched = client.patch(f"{CONTACTS}{contact.pk}/", {"webhook_url": url}, format="json")
    assert _fields(patched) == ["webhook_url"]
    assert ExternalContact.objects.get(pk=contact.pk).webhook_url == HOOK


def test_an_allowed_network_may_receive_webhooks(
    tenants: tuple[Tenant, Tenant], settings: Any
) -> None:
    alpha, _ = tenants
    settings.WEBHOOK_ALLOWED_NETWORKS = ("10.0.0.0/8",)
    body = _hook_body(alpha, webhook_url="https://10.1.2.3/hook")
    made = token_client(alpha.user).post(CONTACTS, body, format="json")
    assert made.status_code == 201, made.content


def test_wrong_types_and_other_farms_are_field_errors(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = token_client(alpha.user)
    assert _fields(client.post(CONTACTS, _hook_body(alpha, name=123), format="json")) == ["name"]
    assert _fields(client.post(CONTACTS, _hook_body(alpha, email="nope"), format="json")) == [
        "email"
    ]
    theirs = _hook_body(alpha, farm=beta.kit.farm.pk)
    assert _fields(client.post(CONTACTS, theirs, format="json")) == ["farm"]
    contact = ExternalContactFactory(farm=alpha.kit.farm)
    moved = client.patch(f"{CONTACTS}{contact.pk}/", {"farm": beta.kit.farm.pk}, format="json")
    assert _fields(moved) == ["farm"]
    assert not ExternalContact.objects.exclude(pk=contact.pk).exists()


def test_an_admin_edits_deactivates_and_reactivates(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    contact = ExternalContactFactory(farm=alpha.kit.farm, email="old@example.org")
    url = f"{CONTACTS}{contact.pk}/"
    patched = client.patch(url, {"name": "Dr Vet", "email": "vet@example.org"}, format="json")
    assert patched.status_code == 200, patched.content
    assert (patched.json()["name"], patched.json()["email"]) == ("Dr Vet", "vet@example.org")

    assert client.delete(url).status_code == 204
    assert client.delete(url).status_code == 204  # deactivated already: the same answer
    assert ExternalContact.objects.get(pk=contact.pk).is_active is False
    assert recipients_resolve(farm=alpha.kit.farm, policy="external_contacts") == []
    assert client.get(url).json()["is_active"] is False
    listed = client.get(CONTACTS, {"is_active": "false"}).json()["results"]
    assert [row["id"] for row in listed] == [contact.pk]
    assert client.patch(url, {"is_active": True}, format="json").json()["is_active"] is True
    assert len(recipients_resolve(farm=alpha.kit.farm, policy="external_contacts")) == 1


def test_viewers_read_and_other_organisations_find_nothing(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    contact = ExternalContactFactory(farm=alpha.kit.farm, webhook_url=HOOK)
    ExternalContactFactory(farm=beta.kit.farm)
    preference = ChannelPreferenceFactory(contact=contact, channel="email", enabled=False)
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    viewer = token_client(alpha.user)
    assert [row["id"] for row in viewer.get(CONTACTS).json()["results"]] == [contact.pk]
    assert [row["id"] for row in viewer.get(PREFERENCES).json()["results"]] == [preference.pk]
    assert viewer.post(CONTACTS, _hook_body(alpha), format="json").status_code == 403
    assert viewer.delete(f"{CONTACTS}{contact.pk}/").status_code == 403
    assert viewer.post(f"{CONTACTS}{contact.pk}/rotate-secret/").status_code == 403
    set_body = {"contact": contact.pk, "channel": "webhook", "enabled": False}
    assert viewer.post(PREFERENCES, set_body, format="json").status_code == 403

    other = token_client(beta.user)
    for url in (f"{CONTACTS}{contact.pk}/", f"{PREFERENCES}{preference.pk}/"):
        assert other.get(url).status_code == 404
        assert other.patch(url, {"enabled": True, "name": "x"}, format="json").status_code == 404
        assert other.delete(url).status_code == 404
    assert other.post(f"{CONTACTS}{contact.pk}/rotate-secret/").status_code == 404
    assert _fields(other.post(PREFERENCES, set_body, format="json")) == ["contact"]
    assert ExternalContact.objects.get(pk=contact.pk).is_active
    assert ChannelPreference.objects.get(pk=preference.pk).enabled is False


def test_a_preference_is_set_changed_and_removed(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    contact = ExternalContactFactory(farm=alpha.kit.farm, email="vet@example.org")
    body = {"contact": contact.pk, "channel": "email", "enabled": False}
    made = client.post(PREFERENCES, body, format="json")
    assert made.status_code == 201, made.content
    again = client.post(PREFERENCES, {**body, "enabled": True}, format="json")
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]
    assert again.json()["enabled"] is True
    url = f"{PREFERENCES}{made.json()['id']}/"
    assert client.patch(url, {"enabled": False}, format="json").json()["enabled"] is False
    assert _fields(client.patch(url, {"channel": "webhook"}, format="json")) == ["channel"]
    assert ChannelPreference.objects.get().enabled is False
    assert client.delete(url).status_code == 204
    assert not ChannelPreference.objects.exists()


def test_a_recipients_opt_out_stays(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    contact = ExternalContactFactory(farm=alpha.kit.farm, email="vet@example.org")
    opted = ChannelPreferenceFactory(contact=contact, channel="email", opted_out_at=timezone.now())
    body = {"contact": contact.pk, "channel": "email", "enabled": True}
    turned_on = client.post(PREFERENCES, body, format="json")
    assert turned_on.status_code == 200 and turned_on.json()["opted_out_at"] is not None
    refused = client.delete(f"{PREFERENCES}{opted.pk}/")
    assert refused.status_code == 409 and refused.json()["code"] == "opted_out"
    assert ChannelPreference.objects.filter(pk=opted.pk, opted_out_at__isnull=False).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"channel": "inbox"}, "channel"),  # the inbox is for users
        ({"channel": "pigeon"}, "channel"),
        ({"enabled": "yes"}, "enabled"),
        ({"contact": "1"}, "contact"),
        ({"contact": 10**30}, "contact"),
    ],
)
def test_a_bad_preference_is_a_400_naming_the_field(
    tenants: tuple[Tenant, Tenant], change: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    contact = ExternalContactFactory(farm=alpha.kit.farm)
    body = {"contact": contact.pk, "channel": "email", "enabled": False, **change}
    response = token_client(alpha.user).post(PREFERENCES, body, format="json")
    assert _fields(response) == [field]
    assert not ChannelPreference.objects.exists()


def test_users_preferences_are_not_listed(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    ChannelPreferenceFactory(user=alpha.user, channel="email", enabled=False)
    client: APIClient = token_client(alpha.user)
    assert client.get(PREFERENCES).json()["results"] == []


@pytest.mark.parametrize(
    ("url", "name", "value"),
    [
        (CONTACTS, "farm", "x"),
        (CONTACTS, "is_active", "maybe"),
        (PREFERENCES, "contact", "1.5"),
        (PREFERENCES, "channel", "pigeon"),
    ],
)
def test_a_bad_list_filter_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], url: str, name: str, value: str
) -> None:
    alpha, _ = tenants
    response = token_client(alpha.user).get(url, {name: value})
    assert _fields(response) == [name]
