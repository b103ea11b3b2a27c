"""Bearer tokens → tenants (``auth.Tokens``): what a snapshot accepts, remembers, and forgets."""

from __future__ import annotations

from coordinator.service.auth import ADMIN, Tokens, token_sha256


def _tokens() -> Tokens:
    return Tokens({"acme": token_sha256("acme-t"), "globex": token_sha256("globex-t")}, token_sha256("adm"))


def test_each_token_names_its_tenant_every_time() -> None:
    tokens = _tokens()
    for _ in range(3):  # the first answer is computed, the later ones remembered: all the same
        assert tokens.identify("Bearer acme-t") == "acme"
        assert tokens.identify("bearer  globex-t ") == "globex"
        assert tokens.identify("Bearer adm") is ADMIN


def test_unknown_missing_and_malformed_tokens_are_refused_and_not_remembered() -> None:
    tokens = _tokens()
    for header in (None, "", "Bearer", "Bearer  ", "Basic acme-t", "acme-t", "Bearer acme-t2"):
        assert tokens.identify(header) is None
    for n in range(1000):
        assert tokens.identify(f"Bearer guess-{n}") is None
    assert tokens.identify("Bearer acme-t") == "acme"
    assert len(tokens._accepted) <= 3  # bounded by the configured tokens, whatever callers send


def test_a_new_snapshot_forgets_a_revoked_token() -> None:
    before = _tokens()
    assert before.identify("Bearer acme-t") == "acme"
    after = Tokens({"acme": token_sha256("acme-rotated")}, None)
    assert after.identify("Bearer acme-t") is None
    assert after.identify("Bearer acme-rotated") == "acme"
    assert after.identify("Bearer adm") is None
