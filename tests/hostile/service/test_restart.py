"""Last in the folder: stop the service and start it again on the database every attack before left
(issue 22 point 9's "restarts cleanly"; one restart for the folder, as a start costs ~5-10 s here).

The start must succeed whatever the tenants stored; B's region and scripts must be as B left them
(``Arena.restart`` checks), each attack's accepted state must be back and nothing it was refused may
be (the checks the cases left in ``arena.after_restart``), and B's calls keep their latency.
"""

from __future__ import annotations

from hostile_service import Arena


def test_the_service_restarts_cleanly_on_what_the_attacks_left(arena: Arena) -> None:
    arena.restart()
    failed = []
    for what, check in arena.after_restart:
        try:
            check()
        except AssertionError as exc:
            failed.append(f"{what}: {exc}")
    assert not failed, f"{len(failed)} of {len(arena.after_restart)} after the restart: {failed[:5]}"
    with arena.alongside("after the restart"):
        arena.healthy()
