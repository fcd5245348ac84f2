"""API credentials: a token is stored only as a SHA-256 digest (the key is shown once, when it
is issued or rotated), found by a short non-secret prefix and compared in constant time.
Authentication failures and anonymous requests are throttled per client address before any
permission is checked."""
