"""The API token table: a digest of each key, never the key."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A user's API credential (one per user: issuing again rotates it). ``prefix`` is the
    key's first characters, not secret, so a presented key finds its row without a scan;
    ``digest`` is the SHA-256 of the whole key, so a copy of the table authenticates nobody."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    prefix = models.CharField(max_length=8, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… (user:{self.user_id})"
