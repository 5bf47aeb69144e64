"""Keep-alive for started streams, so a proxy's idle timeout only ever bounds the first byte.

The gateway turns the spec's `timeouts.first_byte` into Envoy's `per_try_idle_timeout`, which Envoy
applies to every gap between bytes of an attempt, not only to the first. A stream whose next token
waits (in the queue, behind a prefill, on a slow model) would be cut mid-answer, and a response that
has begun cannot be retried. So once a stream has started, its front end sends a keep-alive whenever
no event came for `interval` seconds: `event: ping` on /v1/messages (as Anthropic's own stream does)
and an SSE comment line `: ping` on /v1/chat/completions (which SSE clients, the OpenAI SDK among
them, ignore). A server that sends no first byte at all is still cut by `first_byte`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TypeVar

DEFAULT_INTERVAL = 0.25  # seconds; well below the smallest first_byte `graystack up` sets (1 s)

Item = TypeVar("Item")


class Idle:
    """Nothing came for one interval: the stream's front end sends a keep-alive."""


IDLE = Idle()


async def with_keepalive(
    source: AsyncGenerator[Item, None], interval: float
) -> AsyncGenerator[Item | Idle, None]:
    """`source`'s items, with IDLE between any two that are more than `interval` apart.

    The pending `anext` runs as a task that outlives each wait, so a keep-alive never cancels the
    source mid-item; closing this iterator cancels that task and closes the source.
    """
    pending: asyncio.Task[Item] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield IDLE
                continue
            task, pending = pending, None
            try:
                item = task.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        await source.aclose()
