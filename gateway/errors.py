"""The gateway's errors, drawn in one place (after httpx's `_exceptions.py`).

    GatewayError
    ├── SpecError     a spec, a split or a change that cannot go live (a ValueError too)
    ├── Refused       this gateway will not do it: fault injection is off, an admin API off loopback
    │                 without a token
    ├── NotFound      no such thing here: a variant the spec does not name, no rollout controller
    ├── Conflict      another replica leads: a change made here would be overwritten by its state
    └── Unreachable   an upstream did not answer: Prometheus, an Envoy or model server scraped

The admin API answers each with one HTTP status (gateway/admin/api.py); the CLI prints the message.
A leaf: it imports nothing, so every floor of `gateway/` can raise these.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Anything the gateway refuses or cannot do; the message says what and why."""


class SpecError(GatewayError, ValueError):
    """A spec that cannot go live; the message names the offending field."""


class Refused(GatewayError):
    """The gateway is set up not to do this; the message says how to turn it on."""


class NotFound(GatewayError):
    """The thing asked for is not here."""


class Conflict(GatewayError):
    """Another party owns the thing asked to change."""


class Unreachable(GatewayError):
    """An upstream the gateway reads did not answer."""
