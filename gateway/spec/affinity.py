"""Where a client's identity comes from, for sticky cohorts (`routing.affinity`, docs/spec-and-routing.md).

An ordered list of sources, each exactly one of `{header: NAME}`, `{cookie: NAME}` or `{body: DOTTED.PATH}`
(a path into the request's JSON body: `user`, `metadata.user_id`, `previous_response_id`); the first source
present in a request gives its key. Empty (the default): every request is split at random, as before.
Its own module so the spec's model stays one screen of routing, and the Envoy builders
(gateway/envoy/affinity.py) read one small type.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, model_validator

from gateway import names
from gateway.spec.fields import SpecModel

# RFC 9110 token: what Envoy accepts as a header name, and RFC 6265's cookie-name (a token too).
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A dotted path of JSON object keys; a key is letters, digits, `_` and `-` (OpenAI's and Anthropic's fields).
_BODY_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def check_body_path(path: str) -> str:
    """A dotted path of JSON object keys (`user`, `metadata.user_id`, `model`), or ValueError."""
    if not _BODY_PATH.match(path):
        raise ValueError(f"body {path!r} is not a dotted path of JSON keys, e.g. user or metadata.user_id")
    return path


BodyPath = Annotated[str, AfterValidator(check_body_path)]
# Headers a client cannot name as its identity: the ones graystack sets itself.
_RESERVED_HEADERS = frozenset(
    {
        names.AFFINITY_HEADER,
        names.MATCH_HEADER,
        names.ROUTED_HEADER,
        names.SEGMENT_HEADER,
        names.VARIANT_HEADER,
    }
)

SourceKind = Literal["header", "cookie", "body"]


class AffinitySource(SpecModel):
    """One place a client's key may be: exactly one of `header`, `cookie` or `body`."""

    header: str | None = None
    cookie: str | None = None
    body: str | None = None

    @model_validator(mode="after")
    def _one_valid_place(self) -> AffinitySource:
        given = [kind for kind in ("header", "cookie", "body") if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError(
                "an affinity source is exactly one of {header: NAME}, {cookie: NAME} or {body: DOTTED.PATH}"
                f", got {given or 'none'}"
            )
        if self.header is not None and (
            not _TOKEN.match(self.header) or self.header.lower() in _RESERVED_HEADERS
        ):
            raise ValueError(f"header {self.header!r} is not a header name a client can send")
        if self.cookie is not None and not _TOKEN.match(self.cookie):
            raise ValueError(f"cookie {self.cookie!r} is not a valid cookie name")
        if self.body is not None:
            check_body_path(self.body)
        return self

    @property
    def kind(self) -> SourceKind:
        if self.header is not None:
            return "header"
        return "cookie" if self.cookie is not None else "body"

    @property
    def name(self) -> str:
        """The header's, cookie's or body path's name (a header's in lower case, as Envoy keeps it)."""
        if self.header is not None:
            return self.header.lower()
        return self.cookie if self.cookie is not None else str(self.body)

    @property
    def label(self) -> str:
        """`header:x-user-id`, `cookie:session`, `body:metadata.user_id`: how logs and status name it."""
        return f"{self.kind}:{self.name}"


def cohort_header(sources: list[AffinitySource]) -> str | None:
    """The first header source's name: what a picker reads a request's cohort by (a cookie or body source
    it does not read)."""
    return next((source.header for source in sources if source.header), None)
