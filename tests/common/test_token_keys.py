"""API token keys in Meta (issue 26): the digest is a unique constraint that still refuses a
second row with the same digest, and a key still finds its row by prefix and signs in."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from common.accounts.models import ApiToken
from common.accounts.selectors import api_token_for_key
from common.accounts.services import api_token_issue
from tests.unique_keys import key_absorbs_copies

pytestmark = pytest.mark.django_db


def test_a_token_copy_is_absorbed_by_its_digest_alone() -> None:
    api_token_issue(user=User.objects.create_user(username="alpha"))
    other = User.objects.create_user(username="beta")
    token = ApiToken.objects.get()
    key_absorbs_copies(token, "digest", "0" * 64, user=other.pk)  # one token per user too


def test_a_key_still_finds_its_token_by_prefix() -> None:
    user = User.objects.create_user(username="alpha")
    issued = api_token_issue(user=user)
    found = api_token_for_key(key=issued.key, now=timezone.now())
    assert found is not None and found.user_id == user.pk
