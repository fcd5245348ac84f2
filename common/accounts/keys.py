"""What a key is: random URL-safe text whose first characters name its row, stored as its
SHA-256. Pure functions, no database."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX_CHARS = 8
KEY_RANDOM_BYTES = 32  # 43 URL-safe characters


def api_key_new() -> str:
    return secrets.token_urlsafe(KEY_RANDOM_BYTES)


def api_key_digest(key: str) -> str:
    """SHA-256 of the key: a key is 256 random bits, so a fast hash suffices (no stretching)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def api_key_prefix(key: str) -> str:
    return key[:KEY_PREFIX_CHARS]
