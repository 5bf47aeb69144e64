"""The optional judge: any OpenAI-compatible chat endpoint, shown two answers to one request, asked which
is better. Its verdicts feed a sequential test like every other check (the candidate loses more often than
`max_loss`), so a judge that is noisy costs time, not false rollbacks.

Blind and fair by construction: the two answers are shown in an order drawn at random for each pair
(judges prefer a position: the first answer wins more often for many models), labelled only A and B,
and the verdict is mapped back to the candidate's. The judge answers with one word (A, B or TIE); a reply
that is not one of them is no verdict, never a guess. Spent under a budget of calls per hour (a judge
costs money or GPU time), and every call has a timeout: a judge that is down, slow, over budget or
talking nonsense gives no verdict and says why, so the check stays inconclusive (never passes on
missing evidence) and no client request waits on it.

The request itself is not captured (it can hold personal data, and it is the larger half), so the
built-in template shows the answers alone; a template may name `{request}` for callers that have it.
"""

from __future__ import annotations

import random
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from gateway.errors import SpecError
from gateway.spec.quality import check_template

Preference = Literal["worse", "tie", "better"]  # the candidate's answer against the baseline's
Choice = Literal["A", "B", "TIE"]

TEMPLATE = """You compare two answers to the same request. Judge which answer is better: correct, \
complete, clear. Ignore which one comes first and how long each is.

Answer A:
{first}

Answer B:
{second}

Reply with exactly one word: A if answer A is better, B if answer B is better, TIE if neither is."""
_PLACEHOLDER = re.compile(r"\{(request|first|second)\}")  # a template's (gateway/spec/quality.py)
_CHOICE = re.compile(r"^\W*(A|B|TIE)\b", re.IGNORECASE)
HOUR = 3600.0
PROMPT_FIELD = "analysis.quality.judge.prompt"


def read_template(path: str | None) -> str:
    """The judge's template: the built-in one (None), or the file `path`, read here, where the judge runs
    (the spec is also validated where the file need not exist); SpecError naming the field and the path
    where the file cannot be read or is not a template."""
    if path is None:
        return TEMPLATE
    try:
        return check_template(Path(path).read_text())
    except OSError as error:
        raise SpecError(f"{PROMPT_FIELD}: {path}: cannot read it: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise SpecError(f"{PROMPT_FIELD}: {path}: not UTF-8 text (byte {error.start})") from error
    except ValueError as error:  # not a template
        raise SpecError(f"{PROMPT_FIELD}: {path}: {error}") from error


def prompt(template: str, request: str, first: str, second: str) -> str:
    """The template filled in, in one pass (an answer that holds `{second}` stays as it is)."""
    values = {"request": request, "first": first, "second": second}
    return _PLACEHOLDER.sub(lambda found: values[found.group(1)], template)


def parse_choice(reply: str) -> Choice | None:
    """The judge's one word, or None where its reply does not start with A, B or TIE."""
    found = _CHOICE.match(reply.strip())
    return found.group(1).upper() if found else None  # type: ignore[return-value]


def preference_of(choice: Choice, candidate_first: bool) -> Preference:
    """The candidate's verdict from the judge's choice and the order the answers were shown in."""
    if choice == "TIE":
        return "tie"
    return "better" if (choice == "A") == candidate_first else "worse"


@dataclass(frozen=True)
class Judged:
    """One pair's outcome: a verdict, or None and why there is none."""

    preference: Preference | None
    why: str = ""


class Budget:
    """At most `per_hour` calls in any hour (a sliding window over the calls' start times)."""

    def __init__(self, per_hour: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_hour < 1:
            raise ValueError(f"the judge's budget_per_hour must be at least 1, got {per_hour}")
        self.per_hour = per_hour
        self.clock = clock
        self._calls: deque[float] = deque()

    def take(self) -> bool:
        now = self.clock()
        while self._calls and self._calls[0] <= now - HOUR:
            self._calls.popleft()
        if len(self._calls) >= self.per_hour:
            return False
        self._calls.append(now)
        return True


class Judge:
    """Asks the judge at `url` (an OpenAI-compatible base URL, e.g. http://judge:8000/v1) about pairs."""

    def __init__(
        self,
        url: str,
        model: str,
        budget: Budget,
        *,
        template: str = TEMPLATE,
        timeout: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint = f"{url.rstrip('/')}/chat/completions"
        self.model = model
        self.budget = budget
        self.template = check_template(template)
        self.timeout = timeout
        self.rng = rng or random.Random()

    async def compare(self, baseline: str, candidate: str, request: str = "") -> Judged:
        """The candidate's verdict on one pair, or why there is none."""
        if not self.budget.take():
            return Judged(None, f"the judge's budget of {self.budget.per_hour} calls an hour is spent")
        candidate_first = self.rng.random() < 0.5
        first, second = (candidate, baseline) if candidate_first else (baseline, candidate)
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt(self.template, request, first, second)}],
            "max_tokens": 4,
            "temperature": 0,
        }
        try:
            # a client per call: a judge is called at most `budget_per_hour` times an hour, and nothing
            # is left open when the guard replaces its provider (a spec change)
            async with httpx.AsyncClient() as client:
                response = await client.post(self.endpoint, json=body, timeout=self.timeout)
        except httpx.TimeoutException:
            return Judged(None, f"the judge did not answer within {self.timeout:g} s")
        except httpx.HTTPError as error:
            return Judged(None, f"the judge is unreachable: {error!r}")
        if response.status_code != 200:
            return Judged(None, f"the judge answered HTTP {response.status_code}: {response.text[:200]}")
        reply = _reply(response)
        if reply is None:
            return Judged(None, f"the judge's answer is not a chat completion: {response.text[:200]}")
        choice = parse_choice(reply)
        if choice is None:
            return Judged(None, f"the judge's reply is not A, B or TIE: {reply[:80]!r}")
        return Judged(preference_of(choice, candidate_first))


def _reply(response: httpx.Response) -> str | None:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
