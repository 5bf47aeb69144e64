"""The API table (`apis:` in the spec): per method and path, what kind of API it is, how the gateway treats
it, and which of the rollout's checks its traffic feeds (docs/spec-and-routing.md, "The API table").

    apis:
      unknown_paths: refuse            # or baseline: a path not in the table goes to the baseline
      routes:                          # merged over DEFAULT_ROUTES, keyed "METHOD /path"
        "POST /v1/embeddings": {treatment: baseline}
        "POST /v1/completions": {treatment: refuse}
        "POST /v2/generate": {kind: other, checks: [errors, latency]}

A path is literal segments, or `{name}` for one segment of any value (`/v1/responses/{id}`). Treatments:
`split` (between the variants, by the header rules and the weighted split), `baseline` (pinned: the
baseline's endpoints through a cluster the analysis never reads) and `refuse` (the API's JSON error, 404).
Checks: `errors` (Envoy counts every request a variant's cluster carries, so a split API always feeds
them) and `latency` (time to first token and per output token, which embeddings and token counting
have none of). The servers' metrics, admin and health routes are never in the table (PROTECTED).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, cast, get_args

from pydantic import Field, field_validator, model_validator

from gateway.spec.fields import SpecModel

Kind = Literal[
    "anthropic_messages",
    "anthropic_count_tokens",
    "openai_chat",
    "openai_completions",
    "openai_responses",
    "openai_embeddings",
    "models",
    "other",
]
Treatment = Literal["split", "baseline", "refuse"]
Check = Literal["errors", "latency"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
_METHODS = get_args(Method)

# What each kind's split traffic feeds when its entry names no `checks`.
KIND_CHECKS: dict[str, tuple[Check, ...]] = {
    "anthropic_messages": ("errors", "latency"),
    "anthropic_count_tokens": ("errors",),
    "openai_chat": ("errors", "latency"),
    "openai_completions": ("errors", "latency"),
    "openai_responses": ("errors", "latency"),
    "openai_embeddings": ("errors",),
    "models": ("errors",),
    "other": ("errors", "latency"),
}

# The model servers' own routes (graystack's, vLLM's, llama.cpp's, transformers serve's): for the cluster
# (Prometheus, the probes, Envoy's health checks reach the pods directly), never for clients. Each is
# refused with every path under it; the spec's health-check paths are added to them (RolloutSpec).
PROTECTED = ("/metrics", "/admin", "/healthz", "/readyz", "/health", "/ping")

_SEGMENT = re.compile(r"^(?:[A-Za-z0-9._~-]+|\{[A-Za-z_][A-Za-z0-9_]*\})$")


def path_regex(path: str) -> str:
    """An RE2 regex for the whole path: each `{name}` segment is one segment of any value."""
    parts = [
        "[^/]+" if part.startswith("{") else re.escape(part) for part in path.removeprefix("/").split("/")
    ]
    return "^/" + "/".join(parts) + "$"


def reaches(path: str, protected: str) -> bool:
    """Whether the table path `path` matches `protected`, or a path under it, for some segment values."""
    mine, theirs = path.strip("/").split("/"), protected.strip("/").split("/")
    return len(mine) >= len(theirs) and all(
        part.startswith("{") or part == wanted for part, wanted in zip(mine, theirs, strict=False)
    )


class ApiRoute(SpecModel):
    """One entry. Over a default's key, what it leaves out is the default's (its `checks` too, unless the
    treatment changes); elsewhere `kind` is required, `treatment` is `split`, and `checks` the kind's
    (KIND_CHECKS) for a split entry, none for the others."""

    kind: Kind | None = None
    treatment: Treatment | None = None
    checks: list[Check] | None = None


class Entry(SpecModel):
    """A table entry with everything resolved: what the route builder and the answers read."""

    method: Method
    path: str
    kind: Kind
    treatment: Treatment
    checks: tuple[Check, ...]

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def templated(self) -> bool:
        return "{" in self.path


def _checks_of(kind: str, treatment: str) -> tuple[Check, ...]:
    """What an entry that names no `checks` feeds: its kind's when split, nothing otherwise."""
    return KIND_CHECKS[kind] if treatment == "split" else ()


def _default(
    method: Method,
    path: str,
    kind: Kind,
    treatment: Treatment = "split",
    checks: tuple[Check, ...] | None = None,
) -> Entry:
    checks = _checks_of(kind, treatment) if checks is None else checks
    return Entry(method=method, path=path, kind=kind, treatment=treatment, checks=checks)


# Today's routing, plus the Responses API (its reads and deletes by id go where a create would: the
# split; docs/spec-and-routing.md says what keeps a conversation on one variant) and embeddings.
DEFAULT_ROUTES: tuple[Entry, ...] = (
    _default("POST", "/v1/messages", "anthropic_messages"),
    _default("POST", "/v1/messages/count_tokens", "anthropic_count_tokens"),
    _default("POST", "/v1/chat/completions", "openai_chat"),
    _default("POST", "/v1/completions", "openai_completions"),
    _default("POST", "/v1/responses", "openai_responses"),
    _default("GET", "/v1/responses/{id}", "openai_responses", checks=("errors",)),
    _default("DELETE", "/v1/responses/{id}", "openai_responses", checks=("errors",)),
    _default("POST", "/v1/embeddings", "openai_embeddings"),
    _default("GET", "/v1/models", "models", "baseline"),
)
_DEFAULTS = {entry.key: entry for entry in DEFAULT_ROUTES}


def parse_key(key: str) -> tuple[Method, str]:
    """`"POST /v1/responses"` -> ("POST", "/v1/responses"); ValueError saying what is wrong."""
    method, _, path = key.partition(" ")
    if method not in _METHODS:
        raise ValueError(f"{key!r}: start with a method, one of {list(_METHODS)}")
    if not path.startswith("/") or path == "/":
        raise ValueError(f"{key!r}: the path must start with '/' and name at least one segment")
    bad = [part for part in path[1:].split("/") if not _SEGMENT.match(part)]
    if bad:
        raise ValueError(
            f"{key!r}: segment(s) {bad} are neither plain (letters, digits, . _ ~ -) nor one `{{name}}`"
        )
    for protected in PROTECTED:
        if reaches(path, protected):
            raise ValueError(
                f"{key!r} would reach the servers' own {protected} route, which the gateway never serves"
            )
    return cast("Method", method), path


class Apis(SpecModel):
    unknown_paths: Literal["refuse", "baseline"] = "refuse"
    routes: dict[str, ApiRoute] = Field(default_factory=dict)

    @field_validator("routes")
    @classmethod
    def _valid_entries(cls, routes: dict[str, ApiRoute]) -> dict[str, ApiRoute]:
        for key, route in routes.items():
            _resolve(key, route)
        return routes

    @model_validator(mode="after")
    def _one_entry_per_route(self) -> Apis:
        seen: dict[tuple[str, str], str] = {}
        for entry in self.table():
            shape = (entry.method, path_regex(entry.path))
            if shape in seen:
                raise ValueError(f"routes: {entry.key!r} and {seen[shape]!r} match the same requests")
            seen[shape] = entry.key
        return self

    def table(self) -> tuple[Entry, ...]:
        """The defaults with the spec's entries over them (in the defaults' order, then the spec's)."""
        merged: Mapping[str, Entry] = _DEFAULTS | {key: _resolve(key, r) for key, r in self.routes.items()}
        return tuple(merged.values())


def _resolve(key: str, route: ApiRoute) -> Entry:
    """The entry `route` makes at `key`; ValueError naming the key where it is not one."""
    method, path = parse_key(key)
    default = _DEFAULTS.get(f"{method} {path}")
    kind = route.kind or (default.kind if default is not None else None)
    if kind is None:
        raise ValueError(f"{key!r}: name its `kind` (one of {list(KIND_CHECKS)})")
    treatment = route.treatment or (default.treatment if default is not None else "split")
    if route.checks is not None:
        checks = tuple(dict.fromkeys(route.checks))
    elif default is not None and default.treatment == treatment and default.kind == kind:
        checks = default.checks
    else:
        checks = _checks_of(kind, treatment)
    if treatment == "split" and "errors" not in checks:
        raise ValueError(
            f"{key!r}: a split API always feeds the `errors` checks (Envoy counts every request on "
            "the variant's cluster); list it in `checks`"
        )
    if treatment != "split" and checks:
        raise ValueError(
            f"{key!r}: a {treatment} API feeds no checks (its requests never reach a variant's "
            f"counted cluster); drop `checks`"
        )
    return Entry(method=method, path=path, kind=kind, treatment=treatment, checks=checks)
