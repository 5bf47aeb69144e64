"""Step webhooks, the I/O half (the pure half, which decides when to call and what an answer means:
gateway/rollout/gates.py). The controller starts the calls in the background when the machine asks
(`CallWebhooks`) and hands the answer to the next look, so a slow or dead URL never holds a look,
a command or a rollback beyond nothing: it only holds its step.

Each webhook is POSTed a JSON body naming the rollout and the step, all of a step's at once, each
bounded by its own `timeout` (the whole call, connect to body). A 2xx from every one lets the step go;
the answer's reason names the first failing URL in the spec's order, with its status and the first
`BODY_SHOWN` characters of its body (or the error: a timeout, a refused connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import httpx

from gateway.rollout.rollout_state import WebhookOutcome
from gateway.spec.model import RolloutSpec
from gateway.spec.strategy import Webhook

log = logging.getLogger(__name__)

BODY_SHOWN = 200  # characters of a failing answer's body kept in the reason


async def call_webhooks(spec: RolloutSpec, index: int, now: Callable[[], float]) -> WebhookOutcome:
    """Call step `index`'s webhooks; their joint answer, stamped with `now()` when they are done."""
    steps = spec.strategy.steps if spec.strategy else []
    if index >= len(steps):  # the spec changed under the call: the machine drops the answer
        return WebhookOutcome(index, True, "", False, now())
    hooks = steps[index].webhooks
    body = {"rollout": spec.name, "step": index, "weight": steps[index].weight}
    async with httpx.AsyncClient() as client:
        problems = await asyncio.gather(*(_problem(client, hook, body) for hook in hooks))
    for hook, problem in zip(hooks, problems, strict=True):
        if problem is not None:
            return WebhookOutcome(index, False, f"{hook.url} {problem}", hook.on_failure == "rollback", now())
    return WebhookOutcome(index, True, "", False, now())


async def _problem(client: httpx.AsyncClient, hook: Webhook, body: dict[str, Any]) -> str | None:
    """Why `hook` does not let the step go (None: it answered 2xx)."""
    try:
        async with asyncio.timeout(hook.timeout):
            answer = await client.post(hook.url, json=body, timeout=hook.timeout)
    except (TimeoutError, httpx.TimeoutException):
        return f"did not answer within {hook.timeout:g}s"
    except httpx.HTTPError as error:
        return f"could not be called: {type(error).__name__}: {error}"
    if answer.is_success:
        return None
    text = " ".join(answer.text[:BODY_SHOWN].split())
    return f"answered {answer.status_code}: {text}" if text else f"answered {answer.status_code}"


class WebhookCalls:
    """The controller's calls of one step's webhooks at a time, in the background; the answer waits
    for the next look (`take`)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._answer: WebhookOutcome | None = None

    def start(self, spec: RolloutSpec, index: int) -> None:
        """Call step `index`'s webhooks, unless a call is under way (its answer comes first)."""
        if self._task is not None and not self._task.done():
            return
        log.info("rollout %s: calling the webhooks of step %d", spec.name, index)
        self._task = asyncio.create_task(self._run(spec, index))

    async def _run(self, spec: RolloutSpec, index: int) -> None:
        try:
            self._answer = await call_webhooks(spec, index, self._clock)
        except Exception as error:  # a bug here holds the step, with why, rather than killing the task
            log.exception("rollout %s: the webhooks of step %d failed", spec.name, index)
            self._answer = WebhookOutcome(index, False, f"call failed: {error!r}", False, self._clock())

    def take(self) -> WebhookOutcome | None:
        """The answer of the last call, once (None: none arrived since the last take)."""
        answer, self._answer = self._answer, None
        return answer

    async def wait(self) -> None:
        """Until the call under way (if any) has answered."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
