"""Logs belong to the operator (``logs.py``): what a tenant writes is escaped and capped in the text log
and in ``--log-json``, against a real service; and the formatters themselves, for records of the
library's loggers (nodes, regions, providers) that a service test cannot easily provoke."""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
from collections.abc import Iterator

import pytest
from service_support import ServiceProcess, free_port, write_config

from coordinator.client import ServiceError
from coordinator.service.logs import MAX_MESSAGE_CHARS, JsonFormatter, TextFormatter

FORGED = "2026-01-01 00:00:00,000 rhaipool.service WARNING forged by a tenant"
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \S+ [A-Z]+ ")
BIG = 879 * 1024  # 900 096 characters, under the engine's string limit
BIG_THROW = 'fn render(ctx) { let s = "' + "x" * 879 + '"; for i in 0..10 { s += s; } throw s; }'


@pytest.fixture(scope="module")
def text_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("text-log")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port, workers=1), port, log_json=False)
    yield running
    assert running.stop() == 0


def log_after(service: ServiceProcess, mark: int) -> str:
    return service.log()[mark:]


def forged_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(FORGED[:23])]


def test_a_thrown_message_cannot_forge_a_text_log_line(text_service: ServiceProcess) -> None:
    mark = len(text_service.log())
    with text_service.client("acme") as c:
        c.put_script("region_hook", "forger", f'fn render(ctx) {{ throw "boom\\n{FORGED}\\u001b[2J"; }}')
        c.create_region("forged", script="forger", budget=100)
        c.write("forged", "kept", tokens=1)
        assert c.render("forged", stage_name="plan")["fallback"] is True
    log = log_after(text_service, mark)
    assert "forged by a tenant" in log  # it was logged...
    assert not forged_lines(log)  # ...inside the record, not as a record of its own
    (line,) = [ln for ln in log.splitlines() if "forged by a tenant" in ln]
    assert RECORD.match(line) and "boom\\n2026-01-01" in line and "\x1b" not in line


def test_a_region_name_cannot_forge_a_text_log_line(text_service: ServiceProcess) -> None:
    mark = len(text_service.log())
    with text_service.client("acme") as c:
        c.put_script("region_hook", "failing", 'fn render(ctx) { throw "no"; }')
        try:
            c.create_region("r\n" + FORGED, script="failing", budget=100)
        except ServiceError as refused:  # names may be refused outright: as safe
            assert refused.status in (400, 422)
        else:
            c.write("r\n" + FORGED, "kept", tokens=1)
            c.render("r\n" + FORGED, stage_name="plan")
    assert not forged_lines(log_after(text_service, mark))


def test_a_900_kb_thrown_message_is_capped_in_the_text_log(text_service: ServiceProcess) -> None:
    with text_service.client("acme") as c:
        c.put_script("region_hook", "big", BIG_THROW)
        c.create_region("big", script="big", budget=100)
        c.write("big", "kept", tokens=1)
        mark = len(text_service.log())
        for _ in range(3):
            assert c.render("big", stage_name="plan")["fallback"] is True
    log = log_after(text_service, mark)
    assert "more characters cut]" in log
    assert len(log) < 3 * (MAX_MESSAGE_CHARS + 1024), len(log)  # it was 879 KiB a render


def test_a_900_kb_thrown_message_is_capped_in_the_json_log(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        c.put_script("region_hook", "big", BIG_THROW)
        c.create_region("big-json", script="big", budget=100)
        c.write("big-json", "kept", tokens=1)
        mark = len(service.log())
        for _ in range(3):
            assert c.render("big-json", stage_name="plan")["fallback"] is True
    records = [json.loads(line) for line in log_after(service, mark).splitlines() if line.startswith("{")]
    warned = [r for r in records if r.get("region") == "big-json" and r["level"] == "warning"]
    assert len(warned) == 3 and all("more characters cut]" in r["msg"] for r in warned)
    assert len(log_after(service, mark)) < 3 * (2 * MAX_MESSAGE_CHARS + 4096)


def test_a_warning_any_client_can_cause_per_request_is_logged_once_per_interval(
    text_service: ServiceProcess,
) -> None:
    mark = len(text_service.log())
    for request in [b"NOT HTTP AT ALL\r\n\r\n"] * 30 + [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"
    ] * 30:
        with socket.create_connection(("127.0.0.1", text_service.port), timeout=30) as sock:
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 ")
    log = log_after(text_service, mark)
    assert log.count("Invalid HTTP request received") == 1, log[-2000:]
    assert log.count("Unsupported upgrade request") == 1, log[-2000:]


# -- the formatters, for every logger ----------------------------------------------------------


def record(logger: str, msg: object, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    made = logging.getLogger(logger).makeRecord(
        logger, logging.WARNING, __file__, 1, msg, args, sys.exc_info() if exc else None, extra=extra
    )
    return made


@pytest.mark.parametrize(
    ("logger", "msg", "args"),
    [
        ("coordinator.nodes", "node %s joined with %d workers", ("n1\n" + FORGED, 4)),
        ("coordinator.nodes", "node %s sent a bad node message: %s", ("n1", ValueError("x\r\n" + FORGED))),
        ("rhaipool.regions", "%s (tenant %s)", ("region 'a\u2028" + FORGED + "' failed", "acme")),
        (
            "coordinator.providers.loader",
            "script provider load failed: %s (tenant %r)",
            ("p\n", "t\n" + FORGED),
        ),
        ("rhaipool.service", f"an f-string quoting {FORGED!s}\n{FORGED}", ()),
        ("uvicorn.error", "Invalid HTTP request received: %(what)s", ({"what": "\x1b]0;x\x07\n" + FORGED},)),
    ],
)
def test_every_record_is_one_safe_line(logger: str, msg: str, args: tuple[object, ...]) -> None:
    made = record(logger, msg, *args)
    for formatter in (TextFormatter(), JsonFormatter()):
        line = formatter.format(made)
        assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\u2028" not in line
        assert "forged by a tenant" in line


def test_a_huge_value_is_capped_with_a_marker_of_what_was_cut() -> None:
    made = record("coordinator.nodes", "node %s left; %s", "n" * 900_000, "after", region="r" * 50_000)
    text = TextFormatter().format(made)
    assert len(text) < 4500 and "…[897952 more characters cut]" in text and text.endswith("after")
    doc = json.loads(JsonFormatter().format(made))
    assert len(doc["region"]) < 2100 and doc["region"].endswith("…[47952 more characters cut]")


def test_a_traceback_keeps_its_lines_but_not_a_forged_one() -> None:
    try:
        try:
            raise KeyError("inner\n" + FORGED)
        except KeyError as inner:
            raise RuntimeError("outer\n" + FORGED + "\x1b[2J") from inner
    except RuntimeError:
        made = record("coordinator._core.pool", "pool tick failed", exc=True)
    text = TextFormatter().format(made)
    lines = text.splitlines()
    assert lines[1] == "Traceback (most recent call last):" and len(lines) > 5
    assert not [ln for ln in lines if FORGED[:23] in ln[:30]] and "\x1b" not in text
    assert "RuntimeError: outer\\n2026-01-01" in text
    assert "\n" not in json.loads(JsonFormatter().format(made))["msg"]


def test_a_text_log_line_reads_as_before() -> None:
    """The default format is unchanged: ``TIME LOGGER LEVEL message``, UTC."""
    made = record("rhaipool.service", "configuration reloaded")
    made.created = 0.0
    made.msecs = 0.0
    assert (
        TextFormatter().format(made)
        == "1970-01-01 00:00:00,000 rhaipool.service WARNING configuration reloaded"
    )
