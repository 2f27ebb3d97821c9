"""The calculator MCP server with a slow, seeded latency: what the rollout benchmarks call over stdio.

Real tools (search, sandboxes, web APIs) answer in tens to hundreds of milliseconds with a long
tail, and that latency is what the rollout scheduler has to hide. This server answers exactly as
`rlfactory_nb.tools.servers.calculator` does (same tool name, schema, description and result text,
so the tiny-calculator model sees the tool it was trained on), but first sleeps a delay drawn from a
lognormal distribution: median `--median-ms`, shape `--sigma` (0.7 puts p99 near 5x the median),
capped at `--cap-ms`.

The delay is a pure function of (seed, arguments): every scheduling strategy under comparison sees
the same latency for the same call, whatever order the calls arrive in, so only the scheduling
differs between them. `--median-ms 0` makes a zero-latency tool (for measuring MCP overhead).

    python bench/latency_server.py --median-ms 200 --sigma 0.7 --seed 0     # stdio
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from rlfactory_nb.tools.servers.calculator import DESCRIPTION, evaluate


def delay_s(arguments: Mapping[str, Any], seed: int, median_s: float, sigma: float, cap_s: float) -> float:
    """The seeded lognormal delay of one call: the same arguments and seed always give the same delay.

    >>> a = delay_s({"expression": "1+1"}, seed=0, median_s=0.2, sigma=0.7, cap_s=3.0)
    >>> a == delay_s({"expression": "1+1"}, seed=0, median_s=0.2, sigma=0.7, cap_s=3.0)
    True
    >>> a != delay_s({"expression": "1+1"}, seed=1, median_s=0.2, sigma=0.7, cap_s=3.0)
    True
    >>> delay_s({"expression": "1+1"}, seed=0, median_s=0.0, sigma=0.7, cap_s=3.0)
    0.0
    """
    if median_s <= 0:
        return 0.0
    canonical = json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{seed}\x00{canonical}".encode()).digest()
    # 53 bits of the hash as a uniform number strictly inside (0, 1), then the normal quantile
    uniform = (int.from_bytes(digest[:8], "big") >> 11) / 2**53 + 2**-54
    z = NormalDist().inv_cdf(uniform)
    return min(cap_s, median_s * math.exp(sigma * z))


def build_server(median_ms: float, sigma: float, seed: int, cap_ms: float) -> MCPServer:
    server = MCPServer("calculator", log_level="WARNING")

    # Same name, signature and description as the real calculator: the schema the model reads matches.
    @server.tool(name="calculator", description=DESCRIPTION)
    async def calculator(expression: str) -> CallToolResult:
        await asyncio.sleep(delay_s({"expression": expression}, seed, median_ms / 1000, sigma, cap_ms / 1000))
        text = evaluate(expression)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], is_error=text.startswith("error:")
        )

    return server


def server_args(median_ms: float, sigma: float, seed: int, cap_ms: float = 3000.0) -> tuple[str, ...]:
    """Command-line arguments that start this server with these settings (for a ServerConfig)."""
    return (
        __file__,
        f"--median-ms={median_ms:g}",
        f"--sigma={sigma:g}",
        f"--seed={seed}",
        f"--cap-ms={cap_ms:g}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="calculator MCP server with seeded lognormal latency (stdio)"
    )
    parser.add_argument("--median-ms", type=float, default=200.0, help="median delay; 0 = no delay")
    parser.add_argument("--sigma", type=float, default=0.7, help="lognormal shape; 0 = always the median")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cap-ms", type=float, default=3000.0, help="longest delay")
    args = parser.parse_args()
    build_server(args.median_ms, args.sigma, args.seed, args.cap_ms).run("stdio")


if __name__ == "__main__":
    main()
