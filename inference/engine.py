"""One generation engine behind both HTTP protocols, with continuous batching and chunked prefill.

Requests queue in a bounded waiting line; a scheduler task on the asyncio loop admits them up to
`max_running` and runs steps. Each step advances every request whose prompt is in its cache by one
token with a single `model.decode` call, and spends what is left of a per-step token budget
(`token_budget` new positions in all) on prefilling admitted prompts, oldest first, a chunk at a
time against the cache (a request samples its first token from its prompt's last chunk). So a
long prompt is spread over several steps, interleaved with decode steps, instead of holding every
running stream for the whole of its prefill (vLLM's chunked prefill; Sarathi-Serve).

The bound this gives: between two tokens of a running stream there is one step, and a step computes
at most `token_budget` new positions (its decode rows plus at most `token_budget - decoding` prompt
positions) against caches no longer than the context. A prompt of any admitted length therefore
delays running streams by at most one budget-sized chunk per token, whatever its length
(bench/inference_interference.py measures the gap). Steps run in one worker thread: torch ops
block, and the loop must keep serving HTTP.

One request's failure stays its own: a prefill fails alone, and when a batched decode raises, the
caches are put back as they were and the batch is retried one sequence at a time, so only the
sequence that fails again is failed. A cancelled request (its client went away) leaves the batch
before the next step.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import torch

from inference.config import BOS, EOS
from inference.detokenize import TextAssembler
from inference.kernels.blocks import BlockCounts
from inference.model import KVCache, TinyDecoder

log = logging.getLogger(__name__)

END_TURN, MAX_TOKENS, STOP_SEQUENCE = "end_turn", "max_tokens", "stop_sequence"


class EngineError(Exception):
    """Why a request could not be served; the HTTP layer maps each kind to a status."""


class Overloaded(EngineError):
    """The waiting line is full (HTTP 529 overloaded_error)."""


class InvalidRequest(EngineError):
    """The request cannot fit the model: prompt or max_tokens beyond its context (HTTP 400)."""


class GenerationFailed(EngineError):
    """The model failed on this request (HTTP 500 api_error)."""


@dataclass(frozen=True)
class GenerationRequest:
    prompt: list[int]
    max_tokens: int
    temperature: float = 1.0  # 0 = greedy
    stop_sequences: tuple[str, ...] = ()
    seed: int | None = None
    window_hint: int | None = None  # narrows the zero-layer's bias window for this request


@dataclass(frozen=True)
class Chunk:
    """One generated token and the text it releases (possibly empty: a held-back byte)."""

    text: str


@dataclass(frozen=True)
class Finished:
    stop_reason: str  # END_TURN | MAX_TOKENS | STOP_SEQUENCE
    stop_sequence: str | None
    prompt_tokens: int
    output_tokens: int


Event = Chunk | Finished


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> int:
    """A token from one position's logits; BOS is never generated."""
    logits = logits.to(torch.float64, copy=True)  # in float64 any positive temperature stays > 0
    logits[BOS] = -torch.inf
    if temperature == 0:
        return int(logits.argmax())
    # Shift so the largest logit is 0 before scaling: a tiny temperature then gives -inf, never inf/nan.
    probabilities = torch.softmax((logits - logits.max()) / temperature, dim=-1)
    return int(torch.multinomial(probabilities, 1, generator=generator))


@dataclass(eq=False)
class Generation:
    """One request: the handle the HTTP layer iterates, and the state the engine thread advances."""

    request: GenerationRequest
    effective_window: int
    window_override: int | None
    seed: int
    wake: Callable[[], None]
    cache: KVCache = field(default_factory=KVCache)
    pending: int = -1  # the last sampled token, not yet in the cache
    prefilled: int = 0  # prompt tokens in the cache so far
    generated: int = 0
    done: bool = False
    cancelled: bool = False
    outbox: list[Event | EngineError] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.text = TextAssembler(self.request.stop_sequences)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.events: asyncio.Queue[Event | EngineError] = asyncio.Queue()

    @property
    def prompt_tokens(self) -> int:
        return len(self.request.prompt)

    @property
    def decoding(self) -> bool:
        """Its whole prompt is in the cache and it has a token to decode."""
        return self.prefilled == self.prompt_tokens and not self.done

    def cancel(self) -> None:
        """Stop generating for this request (its client went away); idempotent."""
        if not self.cancelled:
            self.cancelled = True
            self.wake()

    async def stream(self) -> AsyncIterator[Event]:
        """Chunks, then one Finished; raises the EngineError that ended the request instead, if any."""
        while True:
            event = await self.events.get()
            if isinstance(event, EngineError):
                raise event
            yield event
            if isinstance(event, Finished):
                return

    # -- called on the engine thread -----------------------------------------------------------

    def advance(self, logits: torch.Tensor, context: int) -> None:
        token = sample(logits, self.request.temperature, self.generator)
        self.generated += 1
        if token == EOS:
            self._finish(self.text.flush(), END_TURN)
            return
        text, stop = self.text.push(token)
        if stop is not None:
            self._finish(text, STOP_SEQUENCE, stop)
        elif self.generated >= self.request.max_tokens or self.cache.length >= context:
            self._finish(text + self.text.flush(), MAX_TOKENS)
        else:
            self.pending = token
            self.outbox.append(Chunk(text))

    def fail(self, error: Exception) -> None:
        log.exception("generation failed", exc_info=error)
        self.done = True
        self.outbox.append(GenerationFailed(f"the model failed on this request: {error}"))

    def _finish(self, text: str, reason: str, stop: str | None = None) -> None:
        self.done = True
        self.outbox.append(Chunk(text))
        self.outbox.append(Finished(reason, stop, self.prompt_tokens, self.generated))

    # -- called on the loop ----------------------------------------------------------------------

    def deliver(self) -> None:
        for event in self.outbox:
            self.events.put_nowait(event)
        self.outbox.clear()


StepObserver = Callable[[int, BlockCounts], None]  # (decode batch size, bias blocks) after each step
DEFAULT_TOKEN_BUDGET = 256  # new positions per step: a 256-token chunk at 8K context is ~0.2 s on a CPU


@dataclass(frozen=True)
class PrefillChunk:
    """Prompt positions [start, stop) of one request, prefilled in this step."""

    generation: Generation
    start: int
    stop: int

    @property
    def last(self) -> bool:
        return self.stop == self.generation.prompt_tokens


def plan_prefill(prefilling: list[Generation], budget: int) -> list[PrefillChunk]:
    """Chunks for this step: the oldest unfinished prompts first, `budget` positions in all."""
    chunks = []
    for generation in prefilling:
        if budget <= 0:
            break
        stop = min(generation.prompt_tokens, generation.prefilled + budget)
        chunks.append(PrefillChunk(generation, generation.prefilled, stop))
        budget -= stop - generation.prefilled
    return chunks


class Engine:
    def __init__(
        self,
        model: TinyDecoder,
        max_running: int = 8,
        max_waiting: int = 32,
        seed: int | None = None,
        on_step: StepObserver | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
    ) -> None:
        if max_running < 1 or max_waiting < 0:
            raise ValueError(f"need max_running >= 1 and max_waiting >= 0, got {max_running}, {max_waiting}")
        if token_budget <= max_running:
            raise ValueError(
                f"token_budget {token_budget} must exceed max_running {max_running}, or no prompt "
                "would ever be prefilled while the batch is full"
            )
        self.token_budget = token_budget
        self.model = model
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.on_step = on_step
        self._seeds = random.Random(seed)
        self._waiting: deque[Generation] = deque()
        self._running: list[Generation] = []
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def variant(self) -> str:
        return self.model.variant

    @property
    def context(self) -> int:
        return self.model.config.max_seq_len

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_cache_usage(self) -> float:
        """Tokens held in KV caches over what `max_running` full-context sequences would hold."""
        return sum(g.cache.length for g in self._running) / (self.max_running * self.context)

    def effective_window(self, hint: int | None) -> int:
        """The bias reach a request gets: the model's skip distance, narrowed by a zero-layer hint."""
        reach = self.model.skip_distance
        if hint is not None and self.variant == "zero-layer":
            return min(reach, hint)
        return reach

    def start(self) -> None:
        """Start the scheduler on the running loop."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._task = asyncio.get_running_loop().create_task(self._schedule(), name="engine")

    async def stop(self) -> None:
        """Stop scheduling; every request still queued or running fails."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        for generation in [*self._waiting, *self._running]:
            generation.events.put_nowait(GenerationFailed("the server is shutting down"))
        self._waiting.clear()
        self._running.clear()

    def submit(self, request: GenerationRequest) -> Generation:
        """Queue a request; Overloaded when the line is full, InvalidRequest when it cannot fit."""
        if len(request.prompt) > self.context:
            raise InvalidRequest(f"prompt is too long: {len(request.prompt)} tokens > {self.context} maximum")
        if not 1 <= request.max_tokens <= self.context:
            raise InvalidRequest(
                f"max_tokens: {request.max_tokens} is not in 1..{self.context} (the context)"
            )
        if self._task is None:
            raise GenerationFailed("the engine is not running")
        if len(self._running) + len(self._waiting) >= self.max_running + self.max_waiting:
            raise Overloaded(
                f"overloaded: {len(self._running)} running and {len(self._waiting)} waiting requests"
            )
        hint = request.window_hint if self.variant == "zero-layer" else None
        generation = Generation(
            request,
            effective_window=self.effective_window(hint),
            window_override=hint,
            seed=request.seed if request.seed is not None else self._seeds.getrandbits(63),
            wake=self._work.set,
        )
        self._waiting.append(generation)
        self._work.set()
        return generation

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._work.wait()
            self._running = [g for g in self._running if not g.cancelled]
            self._waiting = deque(g for g in self._waiting if not g.cancelled)
            while self._waiting and len(self._running) < self.max_running:
                self._running.append(self._waiting.popleft())
            if not self._running:
                self._work.clear()
                continue
            decoding = [g for g in self._running if g.decoding]
            prefilling = [g for g in self._running if not g.decoding and not g.done]
            chunks = plan_prefill(prefilling, self.token_budget - len(decoding))
            stepped = decoding + [chunk.generation for chunk in chunks]
            try:
                await loop.run_in_executor(self._executor, self._step, chunks, decoding)
            except Exception as error:  # a bug in the step itself: fail its requests, keep serving
                for generation in stepped:
                    if not generation.done:
                        generation.fail(error)
            for generation in stepped:
                generation.deliver()
            self._running = [g for g in self._running if not g.done]

    # -- the engine thread -----------------------------------------------------------------------

    def _step(self, chunks: list[PrefillChunk], decoding: list[Generation]) -> None:
        counts = BlockCounts()
        batch = [g for g in decoding if not g.cancelled]
        if batch:
            self._decode(batch, counts)
        for chunk in chunks:
            generation = chunk.generation
            try:
                prompt = torch.tensor(generation.request.prompt[chunk.start : chunk.stop])
                logits, blocks = self.model.prefill(prompt, generation.cache, generation.window_override)
                counts.add(blocks)
                generation.prefilled = chunk.stop
                if chunk.last:
                    generation.advance(logits, self.context)
            except Exception as error:
                generation.fail(error)
        if self.on_step is not None:
            self.on_step(len(batch), counts)

    def _decode(self, batch: list[Generation], counts: BlockCounts) -> None:
        saved = [replace(g.cache, keys=list(g.cache.keys), values=list(g.cache.values)) for g in batch]
        tokens = torch.tensor([g.pending for g in batch])
        try:
            logits, blocks = self.model.decode(
                tokens, [g.cache for g in batch], [g.window_override for g in batch]
            )
        except Exception as error:
            if len(batch) == 1:
                batch[0].fail(error)
                return
            log.warning("batched decode of %d sequences failed (%s); retrying one by one", len(batch), error)
            for generation, cache in zip(batch, saved, strict=True):
                generation.cache = cache
                self._decode([generation], counts)
            return
        counts.add(blocks)
        for generation, row in zip(batch, logits, strict=True):
            try:
                generation.advance(row, self.context)
            except Exception as error:
                generation.fail(error)
