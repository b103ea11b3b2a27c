"""Every outbound HTTP request of every provider script, through aiohttp sessions kept per address policy.

    worker: http_post(...) ──HOST_CALL──▶ coordinator host handler ──▶ Egress.fetch / Egress.stream
                                                                          │ policy.check_url (by name)
                                                                          │ IP literal: check_address
                                                                          ▼
                  aiohttp.ClientSession + TCPConnector of the request's address policy
                                                                          │ PolicyResolver: resolve,
                                                                          ▼ keep allowed addresses, connect

Transport rules (docs/scripts/host-functions.md#transport): connect timeout 30 s, TCP keepalive 30 s, a total
deadline per request, same-origin redirects only (at most 5 hops, followed here: aiohttp's own are off),
text-only 2xx bodies, a response size cap, up to two quick retries of a unary request whose connection broke,
none for streams. No cookie jar (one client serves every provider and tenant), no proxies or settings
from the environment. Connections are pooled (docs/scripts/host-functions.md#transport); pools are keyed by
the address policy so a connection opened under one provider's ``egress_allow`` is never reused by a provider
without it. aiohttp resolves names through the connector's resolver, which here filters every
address through the policy; it never consults the resolver for an IP-literal host, so those are
checked before every hop (both in ``connect.py``). Unix sockets cannot be reached: only http(s) URLs
are accepted and the connector is TCP only. Content codings are undone by ``encoding.py``, not by
aiohttp, so bodies do not depend on which optional codecs are installed.

Why aiohttp, not httpx: 256 concurrent keep-alive GETs against
``python -m coordinator.bench.standin --delay 0.1`` (2 cores, same run) cost plain
``httpx.AsyncClient`` 0.62 ms of CPU per GET at 1 551 calls/s and ``aiohttp.ClientSession`` 0.17 ms
at 2 414 calls/s (the latency-bound ideal is 2 560/s); ``rhaipool bench providers`` prints both.
HTTP/2: aiohttp speaks HTTP/1.1 only, so ``Egress(http2=True)`` is refused rather than silently
downgraded (the reference falls back to HTTP/1.1 itself, so providers work on 1.1).

Past 400 lines: one request's whole path (policy, secrets, budgets, redirects, errors) is kept in
one reading order, each step a short method.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import ssl
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import certifi
from multidict import CIMultiDict
from yarl import URL

from coordinator.egress import timeouts
from coordinator.egress.body import body_chunks, decode_lossy, read_capped, readable_text
from coordinator.egress.budgets import EgressLimits, EgressQuota, Reservation, TenantBudgets
from coordinator.egress.connect import NoAllowedAddress, PolicyResolver, check_literal, keepalive_socket
from coordinator.egress.encoding import ACCEPT_ENCODING
from coordinator.egress.errors import (
    TRANSPORT_ERRORS,
    HostError,
    InvalidRequest,
    TooManyRedirects,
    denied_error,
    is_retryable,
    status_error,
    transport_error,
)
from coordinator.egress.policy import EgressDenied, EgressPolicy
from coordinator.egress.secrets import SecretMisuse
from coordinator.egress.sse import SseFramer
from coordinator.tenancy import DEFAULT_TENANT

__all__ = ["CONNECT_TIMEOUT_SECS", "MAX_REDIRECTS", "Egress"]

CONNECT_TIMEOUT_SECS = 30.0
MAX_REDIRECTS = 5
_RETRY_SLEEPS = (0.2, 0.4)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Headers that describe the body; dropped with it when a redirect turns the request into a GET.
_BODY_HEADERS = ("content-length", "content-type", "content-encoding", "transfer-encoding")
#: Longest status/header line accepted (aiohttp's default is 8 190; httpx's parser allowed 16 KiB).
_MAX_LINE = 16384
#: An HTTP header name (RFC 9110 token); anything else is refused rather than sent.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(slots=True)
class _Request:
    method: str
    url: URL
    body: bytes | None
    headers: CIMultiDict[str]
    written: str
    """The URL as written (messages name its host as written: ``::ffff:127.0.0.1``, not normalised),
    secret placeholders still in place."""
    secret: bool = False
    """Real secret values were put in (tenant mode, ``secrets.py``): it may not leave its origin."""


@functools.lru_cache(maxsize=1024)
def _port_of(url: str) -> int | None:
    """The explicit port as written (``urlsplit`` refuses to return one out of range); remembered,
    since a provider calls the same few URLs on every request."""
    after_host = urlsplit(url).netloc.rpartition("@")[2].rpartition("]")[2]
    _, colon, digits = after_host.rpartition(":")
    return int(digits) if colon and digits.isdigit() else None


def _redacted(policy: EgressPolicy, error: HostError) -> HostError:
    """``error`` with the provider's real secret values turned back into placeholders (tenant mode)."""
    assert policy.secrets is not None
    message = error.value.get("message")
    if isinstance(message, str):
        error.value["message"] = policy.secrets.redact(message)
        error.args = (error.value["message"],)
    if error.server_text is not None:
        error.server_text = policy.secrets.redact(error.server_text)
    return error


def _unsecret(policy: EgressPolicy, text: str) -> str:
    """``text`` with the provider's real secret values turned back into placeholders, if it has any."""
    return policy.secrets.redact(text) if policy.secrets is not None and len(policy.secrets) else text


def _same_origin(a: URL, b: URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


class Egress:
    """The coordinator's only HTTP client; use as an async context manager."""

    def __init__(
        self,
        *,
        verify: bool = True,
        http2: bool = False,
        max_connections: int = 1024,
        limits: EgressLimits | None = None,
    ) -> None:
        if http2:
            raise ValueError("http2 is not available: egress runs on aiohttp, which speaks HTTP/1.1 only")
        self.budgets = TenantBudgets(limits)  # response bytes and requests in flight, in total and per tenant
        self._verify = verify
        self._max_connections = max_connections
        self._ssl: ssl.SSLContext | bool | None = None
        self._sessions: dict[Any, aiohttp.ClientSession] = {}
        self.requests_sent = 0
        self.responses: Counter[tuple[str, str]] = Counter()
        """Requests by (provider, status class ``"2xx"``..``"5xx"``; ``"error"``: no answer; ``"denied"``)."""

    def set_tenant_quotas(
        self,
        default: EgressQuota | tuple[int | None, int | None],
        per_tenant: Mapping[str, EgressQuota | tuple[int | None, int | None]] | None = None,
    ) -> None:
        """Set every tenant's egress quotas live, ``(max_inflight, max_bytes)`` each (None: off):
        ``default`` for all tenants, ``per_tenant`` overrides by tenant id (``budgets.py``);
        ValueError for a bound that is not a positive integer."""
        self.budgets.set_quotas(default, per_tenant)

    async def __aenter__(self) -> Egress:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session and its connections."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()

    def _session(self, policy: EgressPolicy) -> aiohttp.ClientSession:
        """The session (one connection pool) of the policy's address rules, made on first use."""
        session = self._sessions.get(policy.address_key)
        if session is not None:
            return session
        if self._ssl is None:  # loading the CA bundle costs ~25 ms: once per client, shared by every pool
            self._ssl = ssl.create_default_context(cafile=certifi.where()) if self._verify else False
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=0,
            resolver=PolicyResolver(policy),
            ssl=self._ssl,
            keepalive_timeout=5.0,
            socket_factory=keepalive_socket,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,  # encoding.py decodes: the same bodies whatever codecs are installed
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECS),
            headers={"Accept-Encoding": ACCEPT_ENCODING},
            skip_auto_headers=(
                "Content-Type",
            ),  # a body goes out with no content type unless the script set one
            max_line_size=_MAX_LINE,
            max_field_size=_MAX_LINE,
        )
        self._sessions[policy.address_key] = session
        return session

    def _build(
        self, policy: EgressPolicy, method: str, url: str, body: str | None, headers: dict[str, str]
    ) -> _Request:
        host = policy.check_url(url)
        port = _port_of(url)
        if port is not None and not 0 < port < 65536:
            raise InvalidRequest(f"invalid port {port} in {url!r}")
        for name, value in headers.items():
            if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
                raise InvalidRequest(
                    f"invalid header {name!r}: not an HTTP header name, or a line break in its value"
                )
        sent_url, sent_headers = url, headers
        if policy.secrets is not None:
            sent_url, sent_headers = policy.secrets.fill(host, url, body, headers)
        try:
            target = URL(sent_url)
        except ValueError as exc:
            raise InvalidRequest(f"invalid URL {url!r}: {exc}") from None
        content = body.encode("utf-8") if body is not None else None
        secret = sent_url is not url or sent_headers is not headers
        return _Request(method, target, content, CIMultiDict(sent_headers), url, secret)

    async def _open(self, policy: EgressPolicy, request: _Request) -> aiohttp.ClientResponse:
        check_literal(policy, request.url, request.written)
        try:
            return await self._session(policy).request(
                request.method,
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
            )
        except NoAllowedAddress as exc:
            policy.check_address(exc.host, exc.address)  # the message names this request's provider
            raise EgressDenied(f"egress refused: no allowed address for {exc.host!r}") from exc

    async def _send(
        self, policy: EgressPolicy, request: _Request, on_send: Callable[[], None] | None
    ) -> aiohttp.ClientResponse:
        """Send, following same-origin redirects; a cross-origin one is returned as the answer."""
        for _ in range(MAX_REDIRECTS + 1):
            if on_send is not None:
                on_send()
            self.requests_sent += 1
            try:
                response = await self._open(policy, request)
            except Exception as exc:
                self.responses[(policy.provider, "denied" if isinstance(exc, EgressDenied) else "error")] += 1
                raise
            self.responses[(policy.provider, f"{response.status // 100}xx")] += 1
            location = response.headers.get("location")
            if response.status not in _REDIRECTS or location is None:
                return response
            target = response.url.join(URL(location))
            if not _same_origin(target, request.url):
                if request.secret:
                    response.release()
                    raise SecretMisuse(
                        "egress refused: a redirect to another origin of a request carrying a secret of "
                        f"provider {policy.provider!r} (HTTP {response.status})"
                    )
                return response
            response.release()
            method, headers, content = request.method, request.headers.copy(), request.body
            if response.status in (301, 302, 303):
                method, content = ("HEAD" if method == "HEAD" else "GET"), None
                for name in _BODY_HEADERS:
                    headers.popall(name, None)
            request = _Request(method, target, content, headers, str(target), request.secret)
            policy.check_url(str(target))
        raise TooManyRedirects(f"too many redirects (more than {MAX_REDIRECTS})")

    async def _fetch_once(
        self,
        policy: EgressPolicy,
        request: _Request,
        on_send: Callable[[], None] | None,
        reservation: Reservation,
    ) -> tuple[int, str, str | None]:
        reservation.close()  # a retried attempt starts from nothing held
        response = await self._send(policy, request, on_send)
        try:
            raw = await read_capped(response, policy.max_response_bytes, reservation.grow)
        finally:
            response.release()
        await reservation.grow(len(raw))  # its text, held beside the bytes until it is handed over
        if not 200 <= response.status < 300:
            body = _unsecret(policy, decode_lossy(response, raw))  # before it is cut to an error's length
            if response.status in _REDIRECTS and response.headers.get("location"):
                body = (
                    f"redirect to another origin refused ({response.headers.get('location')}) {body}".strip()
                )
            return response.status, body, response.headers.get("retry-after")
        return response.status, readable_text(response, raw), None

    async def fetch(
        self,
        policy: EgressPolicy,
        method: str,
        url: str,
        *,
        body: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 900.0,
        on_send: Callable[[], None] | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> str:
        """``http_get`` / ``http_post``: the body text of a 2xx answer, else HostError.

        The body's bytes count against the budgets until the text is returned (``budgets.py``).
        """
        async with self.budgets.request(tenant, "response") as reservation:
            if policy.secrets is None or not len(policy.secrets):
                return await self._fetch(policy, method, url, body, headers, timeout, on_send, reservation)
            try:
                text = await self._fetch(policy, method, url, body, headers, timeout, on_send, reservation)
            except HostError as exc:
                raise _redacted(policy, exc) from None
            return policy.secrets.redact(text)

    async def _fetch(
        self, policy: EgressPolicy, method: str, url: str, body: str | None, headers: dict[str, str] | None,
        timeout: float, on_send: Callable[[], None] | None, reservation: Reservation,
    ) -> str:  # fmt: skip
        try:
            request = self._build(policy, method, url, body, headers or {})
            for attempt in range(len(_RETRY_SLEEPS) + 1):
                try:  # each attempt gets the whole per-request timeout, as each reference request does
                    async with timeouts.timeout(timeout):
                        status, text, retry_after = await self._fetch_once(
                            policy, request, on_send, reservation
                        )
                    break
                except TRANSPORT_ERRORS as exc:
                    if attempt == len(_RETRY_SLEEPS) or not is_retryable(exc):
                        raise
                    await asyncio.sleep(_RETRY_SLEEPS[attempt])
        except EgressDenied as exc:
            raise denied_error(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, timeout) from exc
        if not 200 <= status < 300:
            raise status_error(status, text, retry_after)
        return text

    async def stream(
        self,
        policy: EgressPolicy,
        url: str,
        *,
        body: str,
        headers: dict[str, str] | None = None,
        timeout: float = 900.0,
        on_send: Callable[[], None] | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> AsyncGenerator[str, None]:
        """``stream_request``: SSE data payloads as they arrive; HTTP errors before the first one.

        Bytes read but not yet handed over as events count against the budgets (``budgets.py``).
        """
        async with self.budgets.request(tenant, "stream") as reservation:
            payloads = self._stream(policy, url, body, headers, timeout, on_send, reservation)
            async with contextlib.aclosing(payloads):  # a consumer that stops early releases the response
                if policy.secrets is None or not len(policy.secrets):
                    async for payload in payloads:
                        yield payload
                    return
                try:
                    async for payload in payloads:
                        yield policy.secrets.redact(payload)
                except HostError as exc:
                    raise _redacted(policy, exc) from None

    async def _stream(
        self, policy: EgressPolicy, url: str, body: str, headers: dict[str, str] | None, timeout: float,
        on_send: Callable[[], None] | None, reservation: Reservation,
    ) -> AsyncGenerator[str, None]:  # fmt: skip
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            request = self._build(policy, "POST", url, body, headers or {})
            async with timeouts.timeout_at(deadline):
                response = await self._send(policy, request, on_send)
        except EgressDenied as exc:
            raise denied_error(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, timeout) from exc
        try:
            async for payload in self._payloads(response, policy, deadline, timeout, reservation):
                yield payload
        finally:
            response.release()

    async def _payloads(
        self,
        response: aiohttp.ClientResponse,
        policy: EgressPolicy,
        deadline: float,
        timeout: float,
        reservation: Reservation,
    ) -> AsyncGenerator[str, None]:
        if not 200 <= response.status < 300:
            try:
                async with timeouts.timeout_at(deadline):
                    raw = await read_capped(response, policy.max_response_bytes, reservation.grow)
            except (*TRANSPORT_ERRORS, HostError):
                raw = bytearray()
            text = _unsecret(policy, decode_lossy(response, raw))
            raise status_error(response.status, text, response.headers.get("retry-after"))
        framer = SseFramer()
        chunks = aiter(body_chunks(response))
        while not framer.done:
            try:
                async with timeouts.timeout_at(deadline):
                    data = await anext(chunks)
            except StopAsyncIteration:
                break
            except TRANSPORT_ERRORS as exc:
                raise transport_error(exc, timeout) from exc
            await reservation.grow(len(data))
            for payload in framer.feed(data):
                yield payload
            reservation.shrink_to(framer.buffered)  # handed over: only a partial event is still held
            if framer.buffered > policy.max_response_bytes:
                raise HostError(
                    {"kind": "api", "message": "response too large: one event exceeded the size cap"}
                )
        for payload in framer.close():
            yield payload
