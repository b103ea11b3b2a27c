"""The README demo's provider half: the seed's groq script answering through the pool.

A local stand-in server plays the API (nothing leaves the machine); the script is
``examples/providers/groq.rhai`` exactly as the user's documentation ships it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from coordinator.bench.standin import StandinServer
from coordinator.providers.config import parse_config
from coordinator.providers.response import StreamChunk
from coordinator.providers.session import open_runtime

__all__ = ["EXAMPLES", "GROQ_SCRIPT", "provider_demo"]

EXAMPLES = Path(__file__).resolve().parent / "examples"
"""The repository's ``examples/``, shipped inside the package so an installed wheel has them."""
GROQ_SCRIPT = EXAMPLES / "providers" / "groq.rhai"


async def provider_demo(echo: Callable[[str], None] = print) -> bool:
    """Start a stand-in API, load groq.rhai through the pool, run one inference and one stream."""
    with StandinServer() as server, tempfile.TemporaryDirectory(prefix="rhaipool-demo-") as tmp:
        providers = Path(tmp)
        (providers / "groq.rhai").write_text(GROQ_SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
        config = parse_config(
            {
                "providers_dir": str(providers),
                "model_providers": {
                    "groq": {
                        "api_key": "demo-key",
                        "base_url": server.base_url,
                        "egress_allow": ["127.0.0.1"],
                    }
                },
            }
        )
        echo(f"provider groq ({GROQ_SCRIPT.name}) through the pool, API stand-in at {server.base_url}")
        async with open_runtime(config) as runtime:
            ask = {
                "model": "standin-small",
                "messages": [{"role": "user", "content": "Reply with exactly: PONG"}],
            }
            response = await runtime.inference("groq", ask)
            echo(
                f"  inference -> {response.content!r} ({response.tokens_used.total_tokens} tokens, "
                f"finish {response.finish_reason})"
            )
            ask = {
                "model": "standin-small",
                "messages": [{"role": "user", "content": "streamed word by word"}],
            }
            deltas = [
                c.delta.strip()
                async for c in runtime.stream("groq", ask)
                if isinstance(c, StreamChunk) and c.delta
            ]
            echo(f"  stream    -> {' | '.join(deltas)}")
        return response.content == "PONG"
