"""Secrets a sandbox never holds (tenant mode): placeholders out, real values only where they belong.

In tenant mode a provider's secret values (its table's ``api_key`` and credential-shaped keys, its
``env`` entries, whatever ``env_var`` resolves) never reach the worker. The script is given a
placeholder per value instead -- ``rhaipool-secret-`` and 32 random hex digits, new for every loaded
provider -- and egress puts the real value back at the last moment, in two places only:

* a request **header value** (inside a ``Basic`` credential too: ``encode_base64(user + ":" + key)``
  is decoded, filled and encoded again), and
* the URL's **query string** (percent-encoded, as ``encode_uri`` would have done),

and only on a request to one of the provider's secret hosts (its table's ``base_url`` host and
``allowed_hosts``; never a host reached through ``allowed_hosts = ["*"]``). A placeholder anywhere
else -- the body, the URL's path or fragment, a header name, a request to another host, a redirect to
another origin -- refuses the request (:class:`SecretMisuse`, nothing sent). What comes back from a
request that carried a secret (body, events, error messages) has the real value turned back into its
placeholder, so an API that echoes the key hands the script nothing new.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from urllib.parse import quote

from coordinator.egress.errors import SecretMisuse

__all__ = ["PLACEHOLDER_PREFIX", "SecretMisuse", "Secrets", "looks_like_placeholder"]

PLACEHOLDER_PREFIX = "rhaipool-secret-"
_PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX) + r"[0-9a-f]{32}")
#: Most distinct secret values one loaded provider may hold (table keys, env entries, env_var names).
MAX_SECRETS = 256


_BASIC = "basic "


def _basic_text(value: str) -> str | None:
    """The decoded credential of a ``Basic`` header value when it holds a placeholder, else None."""
    if value[: len(_BASIC)].lower() != _BASIC:
        return None
    try:
        text = base64.b64decode(value[len(_BASIC) :].strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if looks_like_placeholder(text) else None


def looks_like_placeholder(text: str) -> bool:
    """Whether ``text`` contains something shaped like a placeholder (any provider's)."""
    return PLACEHOLDER_PREFIX in text and _PLACEHOLDER.search(text) is not None


class Secrets:
    """One loaded provider's secret values and their placeholders; lives in the coordinator only.

    ``hosts`` are the hosts a real value may be sent to. The object is shared by the provider's egress
    policy (which substitutes) and its ``env_var`` view (which adds the values it resolves).
    """

    __slots__ = ("_by_placeholder", "_by_value", "hosts", "provider")

    def __init__(self, provider: str, hosts: frozenset[str]) -> None:
        self.provider = provider
        self.hosts = hosts
        self._by_value: dict[str, str] = {}
        self._by_placeholder: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_value)

    def placeholder(self, value: str) -> str:
        """The placeholder standing for ``value`` (the same one each time); an empty value stays empty."""
        if not value:
            return value
        known = self._by_value.get(value)
        if known is not None:
            return known
        if len(self._by_value) >= MAX_SECRETS:
            raise SecretMisuse(f"provider {self.provider!r} holds more than {MAX_SECRETS} secret values")
        made = PLACEHOLDER_PREFIX + secrets.token_hex(16)
        self._by_value[value] = made
        self._by_placeholder[made] = value
        return made

    def _real(self, placeholder: str, where: str) -> str:
        value = self._by_placeholder.get(placeholder)
        if value is None:
            raise SecretMisuse(
                f"egress refused: the {where} carries a secret placeholder that stands for no secret of "
                f"provider {self.provider!r}"
            )
        return value

    def fill(
        self, host: str, url: str, body: str | None, headers: dict[str, str]
    ) -> tuple[str, dict[str, str]]:
        """The URL and headers to send, real values in; raises SecretMisuse where a placeholder may not go.

        Returns the arguments unchanged (the same objects) when they carry no placeholder.
        """
        if body is not None and looks_like_placeholder(body):
            raise self._refused("the request body")
        before_hash, hash_mark, fragment = url.partition("#")
        head, _, query = before_hash.partition("?")
        if looks_like_placeholder(head) or looks_like_placeholder(fragment):
            raise self._refused("the URL (outside its query string)")
        in_query = looks_like_placeholder(query)
        in_headers = False
        for name, value in headers.items():
            if looks_like_placeholder(name):
                raise self._refused(f"a header name ({name[:40]!r}...)")
            in_headers = in_headers or looks_like_placeholder(value) or _basic_text(value) is not None
        if not (in_query or in_headers):
            return url, headers
        if host.strip("[]") not in self.hosts:
            raise SecretMisuse(
                f"egress refused: host {host!r} is not one of the own hosts of provider {self.provider!r} "
                "(its table's base_url host and allowed_hosts); a secret placeholder may be sent only there"
            )
        if in_query:
            query = _PLACEHOLDER.sub(lambda m: quote(self._real(m.group(0), "query string"), safe=""), query)
            url = f"{head}?{query}{hash_mark}{fragment}"
        if in_headers:
            headers = {name: self._fill_header(name, value) for name, value in headers.items()}
        return url, headers

    def _fill_header(self, name: str, value: str) -> str:
        basic = _basic_text(value)
        if basic is not None:
            filled = _PLACEHOLDER.sub(lambda m: self._real(m.group(0), f"header {name!r}"), basic)
            return value[: len(_BASIC)] + base64.b64encode(filled.encode("utf-8")).decode("ascii")
        if not looks_like_placeholder(value):
            return value
        filled = _PLACEHOLDER.sub(lambda m: self._real(m.group(0), f"header {name!r}"), value)
        if "\r" in filled or "\n" in filled:
            raise SecretMisuse(f"egress refused: a secret value holds a line break (header {name!r})")
        return filled

    def _refused(self, where: str) -> SecretMisuse:
        return SecretMisuse(
            f"egress refused: {where} carries a secret placeholder; the secrets of provider "
            f"{self.provider!r} are sent only in request headers and the query string, to its own hosts"
        )

    def redact(self, text: str) -> str:
        """``text`` with every real value turned back into its placeholder (longest values first)."""
        for value in sorted(self._by_value, key=len, reverse=True):
            for form in {value, quote(value, safe="")}:
                if form in text:
                    text = text.replace(form, self._by_value[value])
        return text
