"""Every outbound HTTP request of every provider script, through one shared ``httpx.AsyncClient``.

    worker: http_post(...) ──HOST_CALL──▶ coordinator host handler ──▶ Egress.fetch / Egress.stream
                                                                          │ policy.check_url (by name)
                                                                          ▼
                        httpx.AsyncClient ─▶ _PolicyTransport ─▶ pool per address policy
                                                                          │ _GuardedBackend: resolve,
                                                                          ▼ check each address, connect

Transport rules (SPEC §3.15): connect timeout 30 s, TCP keepalive 30 s, a total deadline per request,
same-origin redirects only (at most 5 hops), text-only 2xx bodies, a response size cap, up to two
quick retries of a unary request whose connection broke, none for streams. Connections are pooled
(allowed by SPEC §0); pools are keyed by the address policy so a connection opened under one
provider's ``egress_allow`` is never reused by a provider without it.

Past 400 lines because the address check must sit inside the connection path (resolve, check each
address, connect) that httpx's transport and httpcore's backend define; the policy itself, bodies,
budgets and SSE framing live in their own modules.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import ipaddress
import socket
import ssl
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import httpcore
import httpx
from httpcore._utils import is_socket_readable

from coordinator.egress.body import decode_lossy, read_capped, readable_text
from coordinator.egress.budgets import EgressLimits, Reservation, TenantBudgets
from coordinator.egress.errors import HostError, denied_error, status_error, transport_error
from coordinator.egress.policy import EgressDenied, EgressPolicy
from coordinator.egress.sse import SseFramer

__all__ = ["CONNECT_TIMEOUT_SECS", "MAX_REDIRECTS", "Egress"]

CONNECT_TIMEOUT_SECS = 30.0
MAX_REDIRECTS = 5
_RETRY_SLEEPS = (0.2, 0.4)
#: Unary failures retried in place (SPEC §3.15: reset / closed / broken pipe / eof / timed out).
_RETRYABLE = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.TimeoutException,
    TimeoutError,
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Headers that describe the body; dropped with it when a redirect turns the request into a GET.
_BODY_HEADERS = ("content-length", "content-type", "content-encoding", "transfer-encoding")
_KEEPALIVE = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
if hasattr(socket, "TCP_KEEPIDLE"):
    _KEEPALIVE.append((socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30))


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves the host itself and connects only to addresses the policy allows."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def _addresses(self, host: str, port: int) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
            pass
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"dns error: failed to lookup address for {host}: {exc}") from exc
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the first allowed address; refuse when none is allowed."""
        addresses = await self._addresses(host, port)
        allowed = [a for a in addresses if self._policy.address_allowed(host, a)]
        if not allowed:
            self._policy.check_address(host, addresses[0])
        error: Exception | None = None
        for address in allowed:
            try:
                stream = await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
                return _CheapInfoStream(stream)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        """Never: egress is TCP only."""
        raise EgressDenied("egress refused: unix sockets are not reachable from provider scripts")

    async def sleep(self, seconds: float) -> None:
        """Delegate."""
        await self._inner.sleep(seconds)


class _Released(httpx.AsyncByteStream):
    """A response body that tells its shard, once, when it is closed (its connection is free again)."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class _CheapInfoStream(httpcore.AsyncNetworkStream):
    """A connection that answers "is it readable?" from its socket directly.

    httpcore asks that of every idle connection of a pool each time it assigns a request; anyio
    answers through a typed-attribute table it rebuilds (with a ``getpeername`` call) on every
    question — ~10 % of the coordinator's CPU per brokered GET at 256 callers (cProfile).
    """

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _CheapInfoStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return is_socket_readable(self._socket)  # httpcore's own test, minus the table
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)


class _PolicyTransport(httpx.AsyncBaseTransport):
    """Routes each request to a connection pool of its address policy.

    Each policy gets ``shards`` small pools: httpcore's pool does work proportional to its
    connections times its waiting requests on every request, so one pool of 1000 connections is far
    slower under load than 128 pools of 8 (``rhaipool bench providers``). A request goes to the
    shard with the fewest requests in use (first on a tie): load stays even, so a shard needs no
    more connections than its share of the callers and keeps reusing them — round-robin and
    "first shard with an idle connection" both opened ~25 new connections per 1 000 calls at
    steady load, each a TCP (and TLS) handshake. One caller at a time always gets shard 0.
    """

    def __init__(self, *, verify: bool, http2: bool, max_connections: int, shards: int = 128) -> None:
        self._verify = verify
        self._http2 = http2
        self._per_shard = max(1, max_connections // shards)
        self._shards = shards
        self._pools: dict[Any, list[httpx.AsyncHTTPTransport | None]] = {}
        self._in_use: dict[Any, list[int]] = {}
        """Per policy and shard: requests sent and not yet closed (waiting for or holding a connection)."""
        self._ssl: ssl.SSLContext | None = None

    def _new_pool(self, policy: EgressPolicy) -> httpx.AsyncHTTPTransport:
        if self._ssl is None:  # loading the CA bundle costs ~25 ms: once per client, shared by every shard
            self._ssl = httpx.create_ssl_context(verify=self._verify, trust_env=False)
        transport = httpx.AsyncHTTPTransport(verify=self._ssl, http2=self._http2, trust_env=False)
        # httpx does not expose httpcore's network_backend; replace its pool with one that has ours.
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=self._ssl,
            max_connections=self._per_shard,
            max_keepalive_connections=self._per_shard,
            keepalive_expiry=5.0,
            http1=True,
            http2=self._http2,
            network_backend=_GuardedBackend(policy),
            socket_options=_KEEPALIVE,
        )
        return transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Dispatch to the least busy shard of the request's policy; count it until its body closes."""
        policy = request.extensions.get("rhaipool_policy")
        if not isinstance(policy, EgressPolicy):
            raise EgressDenied("egress refused: request without a provider policy")
        shards = self._pools.setdefault(policy.address_key, [None] * self._shards)
        in_use = self._in_use.setdefault(policy.address_key, [0] * self._shards)
        index = in_use.index(min(in_use))
        transport = shards[index]
        if transport is None:
            transport = shards[index] = self._new_pool(policy)

        def release() -> None:
            in_use[index] -= 1

        in_use[index] += 1
        try:
            response = await transport.handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Released(response.stream, release)
        return response

    async def aclose(self) -> None:
        """Close every pool."""
        for shards in self._pools.values():
            for transport in shards:
                if transport is not None:
                    await transport.aclose()
        self._pools.clear()
        self._in_use.clear()


def _no_cookies() -> http.cookiejar.CookieJar:
    """A jar that accepts nothing: one client serves every provider and tenant, and the reference's
    client stores no cookies, so a Set-Cookie must never ride along on anyone's next request."""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
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
        self.budgets = TenantBudgets(limits)  # response bytes and requests in flight, in total and per tenant
        self._transport = _PolicyTransport(verify=verify, http2=http2, max_connections=max_connections)
        self._client = httpx.AsyncClient(
            transport=self._transport,
            timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_SECS),
            follow_redirects=False,
            trust_env=False,
            cookies=_no_cookies(),
        )
        self.requests_sent = 0
        self.responses: Counter[tuple[str, str]] = Counter()
        """Requests by (provider, status class ``"2xx"``..``"5xx"``; ``"error"``: no answer; ``"denied"``)."""

    async def __aenter__(self) -> Egress:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client and its pools."""
        await self._client.aclose()

    def _build(
        self, policy: EgressPolicy, method: str, url: str, body: str | None, headers: dict[str, str]
    ) -> httpx.Request:
        policy.check_url(url)
        content = body.encode("utf-8") if body is not None else None
        # Values go out as their UTF-8 bytes (as the reference sends them); httpx would insist on ASCII.
        raw_headers = [(name.encode("utf-8"), value.encode("utf-8")) for name, value in headers.items()]
        request = self._client.build_request(
            method, url, content=content, headers=raw_headers, extensions={"rhaipool_policy": policy}
        )
        port = request.url.port
        if port is not None and not 0 < port < 65536:
            raise httpx.InvalidURL(f"invalid port {port} in {url!r}")
        return request

    async def _send(
        self, policy: EgressPolicy, request: httpx.Request, on_send: Callable[[], None] | None
    ) -> httpx.Response:
        """Send, following same-origin redirects; a cross-origin one is returned as the answer."""
        for _ in range(MAX_REDIRECTS + 1):
            if on_send is not None:
                on_send()
            self.requests_sent += 1
            try:
                response = await self._client.send(request, stream=True)
            except Exception as exc:
                self.responses[(policy.provider, "denied" if isinstance(exc, EgressDenied) else "error")] += 1
                raise
            self.responses[(policy.provider, f"{response.status_code // 100}xx")] += 1
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or location is None:
                return response
            target = response.url.join(location)
            if not _same_origin(target, request.url):
                return response
            await response.aclose()
            method, headers = request.method, request.headers.copy()
            if response.status_code in (301, 302, 303):
                method, content = ("HEAD" if method == "HEAD" else "GET"), None
                for name in _BODY_HEADERS:
                    headers.pop(name, None)
            else:
                content = request.content
            request = self._client.build_request(
                method, target, content=content, headers=headers, extensions=request.extensions
            )
            policy.check_url(str(target))
        raise httpx.TooManyRedirects(f"too many redirects (more than {MAX_REDIRECTS})")

    async def _fetch_once(
        self,
        policy: EgressPolicy,
        request: httpx.Request,
        on_send: Callable[[], None] | None,
        reservation: Reservation,
    ) -> tuple[int, str, str | None]:
        reservation.close()  # a retried attempt starts from nothing held
        response = await self._send(policy, request, on_send)
        try:
            raw = await read_capped(response, policy.max_response_bytes, reservation.grow)
        finally:
            await response.aclose()
        await reservation.grow(len(raw))  # its text, held beside the bytes until it is handed over
        if not 200 <= response.status_code < 300:
            body = decode_lossy(response, raw)
            if response.status_code in _REDIRECTS and response.headers.get("location"):
                body = (
                    f"redirect to another origin refused ({response.headers.get('location')}) {body}".strip()
                )
            return response.status_code, body, response.headers.get("retry-after")
        return response.status_code, readable_text(response, raw), None

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
        tenant: str = "default",
    ) -> str:
        """``http_get`` / ``http_post``: the body text of a 2xx answer, else HostError.

        The body's bytes count against the budgets until the text is returned (``budgets.py``).
        """
        async with self.budgets.request(tenant, "response") as reservation:
            return await self._fetch(policy, method, url, body, headers, timeout, on_send, reservation)

    async def _fetch(
        self, policy: EgressPolicy, method: str, url: str, body: str | None, headers: dict[str, str] | None,
        timeout: float, on_send: Callable[[], None] | None, reservation: Reservation,
    ) -> str:  # fmt: skip
        try:
            request = self._build(policy, method, url, body, headers or {})
            for attempt in range(len(_RETRY_SLEEPS) + 1):
                try:  # each attempt gets the whole per-request timeout, as each reference request does
                    async with asyncio.timeout(timeout):
                        status, text, retry_after = await self._fetch_once(
                            policy, request, on_send, reservation
                        )
                    break
                except _RETRYABLE:
                    if attempt == len(_RETRY_SLEEPS):
                        raise
                    await asyncio.sleep(_RETRY_SLEEPS[attempt])
        except EgressDenied as exc:
            raise denied_error(exc) from exc
        except (httpx.TransportError, httpx.TooManyRedirects, httpx.InvalidURL, TimeoutError, OSError) as exc:
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
        tenant: str = "default",
    ) -> AsyncGenerator[str, None]:
        """``stream_request``: SSE data payloads as they arrive; HTTP errors before the first one.

        Bytes read but not yet handed over as events count against the budgets (``budgets.py``).
        """
        async with self.budgets.request(tenant, "stream") as reservation:
            async for payload in self._stream(policy, url, body, headers, timeout, on_send, reservation):
                yield payload

    async def _stream(
        self, policy: EgressPolicy, url: str, body: str, headers: dict[str, str] | None, timeout: float,
        on_send: Callable[[], None] | None, reservation: Reservation,
    ) -> AsyncGenerator[str, None]:  # fmt: skip
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            request = self._build(policy, "POST", url, body, headers or {})
            async with asyncio.timeout_at(deadline):
                response = await self._send(policy, request, on_send)
        except EgressDenied as exc:
            raise denied_error(exc) from exc
        except (httpx.TransportError, httpx.TooManyRedirects, httpx.InvalidURL, TimeoutError, OSError) as exc:
            raise transport_error(exc, timeout) from exc
        try:
            async for payload in self._payloads(response, policy, deadline, timeout, reservation):
                yield payload
        finally:
            await response.aclose()

    async def _payloads(
        self,
        response: httpx.Response,
        policy: EgressPolicy,
        deadline: float,
        timeout: float,
        reservation: Reservation,
    ) -> AsyncGenerator[str, None]:
        if not 200 <= response.status_code < 300:
            try:
                async with asyncio.timeout_at(deadline):
                    raw = await read_capped(response, policy.max_response_bytes, reservation.grow)
            except (httpx.TransportError, TimeoutError, HostError):
                raw = bytearray()
            text = decode_lossy(response, raw)
            raise status_error(response.status_code, text, response.headers.get("retry-after"))
        framer = SseFramer()
        chunks = response.aiter_bytes()
        while not framer.done:
            try:
                async with asyncio.timeout_at(deadline):
                    data = await anext(chunks)
            except StopAsyncIteration:
                break
            except (httpx.TransportError, TimeoutError, OSError) as exc:
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
