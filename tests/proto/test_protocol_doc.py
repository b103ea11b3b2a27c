"""PROTOCOL.md's command table is the code's command table (codes, names, senders, frame counts)."""

from __future__ import annotations

import re
from pathlib import Path

import proto
from proto import COMMAND_FRAMES, FROM_COORDINATOR, FROM_WORKER, Command

DOC = Path(proto.__file__).with_name("PROTOCOL.md").read_text()


def table() -> dict[str, tuple[int, set[str], int]]:
    rows = re.findall(r"^\| (0x[0-9A-Fa-f]{2}) \| ([A-Z_]+) \| ([WC, ]+) \| (\d+) \|$", DOC, re.MULTILINE)
    return {
        name: (int(code, 16), {s.strip() for s in senders.split(",")}, int(frames))
        for code, name, senders, frames in rows
    }


def test_command_table_matches_the_enum() -> None:
    documented = table()
    assert set(documented) == {c.name for c in Command}
    for command in Command:
        code, senders, frames = documented[command.name]
        assert code == command.value, command
        assert frames == COMMAND_FRAMES, command
        expected = {"W"} if command in FROM_WORKER else set()
        expected |= {"C"} if command in FROM_COORDINATOR else set()
        assert senders == expected, command


def test_every_command_has_a_field_section_and_every_error_class_is_listed() -> None:
    for command in Command:
        assert f"**{command.name}**" in DOC, command
    for error_class in proto.ERROR_CLASSES:
        assert f"`{error_class}`" in DOC, error_class


def test_rfc_sections_present() -> None:
    for heading in [
        "Language",
        "Goals",
        "Assumptions",
        "Architecture",
        "Version negotiation",
        "Error handling",
        "Worked example",
        "Security considerations",
        "Known weaknesses",
        "Heartbeating",
    ]:
        assert re.search(rf"^#+ .*{heading}", DOC, re.MULTILINE | re.IGNORECASE), heading
