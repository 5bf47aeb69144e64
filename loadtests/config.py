"""Parsing the load test's knobs (environment variables or Locust options), kept apart from Locust so it
can be tested without starting a runner."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from gateway.spec.fields import parse_duration

NO_HEADER = "-"  # in a client-type mix: requests that carry no X-Client-Type header

# The load test's default mix (the locustfile's option defaults; bench.load_balancing sends the same).
DEFAULT_CLIENT_TYPES = "-=6,mobile=2,high_load=2"
DEFAULT_PROMPT_LENGTHS = "64=6,1024=3,4096=1"
DEFAULT_MAX_TOKENS = 32
DEFAULT_THINK_TIME = "0.5-1.5"
DEFAULT_CONVERSATION_TURNS = 4  # the conversation user's (opt-in: LOADTEST_CONVERSATIONS)
# Bytes a conversation's messages may carry before the user starts a new one: under the 10,240-token
# context of graystack's byte-level model with its chat template (4 turns of the default mix reached 13,483).
DEFAULT_CONVERSATION_BYTES = 8192


def parse_mix(text: str, what: str) -> dict[str, float]:
    """`name=weight,...` (e.g. `-=6,mobile=2,high_load=2`) into relative weights; a bare name weighs 1."""
    mix: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, weight = item.partition("=")
        name = name.strip()
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"{what}: {item!r} is not NAME=WEIGHT") from None
        if not name or value < 0:
            raise ValueError(f"{what}: {item!r} is not NAME=WEIGHT with a weight >= 0")
        mix[name] = mix.get(name, 0.0) + value
    if not mix or sum(mix.values()) <= 0:
        raise ValueError(f"{what}: {text!r} names nothing with a positive weight")
    return mix


def parse_prompt_lengths(text: str) -> dict[int, float]:
    """`bytes=weight,...` (e.g. `64=6,1024=3,8192=1`): prompt lengths in bytes (the model is byte-level)."""
    lengths = {}
    for name, weight in parse_mix(text, "prompt lengths").items():
        if not name.isdigit() or int(name) < 1:
            raise ValueError(f"prompt lengths: {name!r} is not a positive number of bytes")
        lengths[int(name)] = weight
    return lengths


def parse_think_time(text: str) -> tuple[float, float]:
    """`0.5-1.5` (uniform between) or `1` (fixed), in seconds, between one user's requests."""
    low, sep, high = text.partition("-")
    try:
        bounds = (float(low), float(high) if sep else float(low))
    except ValueError:
        raise ValueError(f"think time: {text!r} is not SECONDS or LOW-HIGH") from None
    if bounds[0] < 0 or bounds[1] < bounds[0]:
        raise ValueError(f"think time: {text!r} needs 0 <= LOW <= HIGH")
    return bounds


@dataclass(frozen=True)
class Stage:
    seconds: float
    users: int


def parse_stages(text: str) -> list[Stage]:
    """`DURATION:USERS,...` (e.g. `1m:5,1m:10,2m:20`): each stage holds its user count for its duration."""
    stages = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        duration, sep, users = item.partition(":")
        if not sep or not users.strip().isdigit():
            raise ValueError(f"stages: {item!r} is not DURATION:USERS (e.g. 1m:10)")
        stages.append(Stage(parse_duration(duration.strip()), int(users)))
    if not stages:
        raise ValueError("stages: name at least one DURATION:USERS")
    return stages


Key = TypeVar("Key")


def weighted_choice(mix: Mapping[Key, float], rng: random.Random) -> Key:
    """One key of `mix`, drawn in proportion to its weight."""
    keys = list(mix)
    return rng.choices(keys, weights=[mix[k] for k in keys])[0]


def prompt_text(length: int, rng: random.Random) -> str:
    """`length` bytes of plain ASCII words: varied enough that no cache could serve it, cheap to make."""
    words = ("gray", "release", "envoy", "canary", "variant", "bias", "window", "token", "split", "probe")
    parts: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(words)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:length]


def parse_share(text: str, what: str) -> float:
    """A share between 0 and 1 (e.g. `0.25`)."""
    try:
        share = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number between 0 and 1") from None
    if not 0 <= share <= 1:
        raise ValueError(f"{what}: {text!r} is not between 0 and 1")
    return share
