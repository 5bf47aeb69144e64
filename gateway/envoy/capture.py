"""Answer capture in the data plane (issue 28), for any server: which requests' answers Envoy keeps, and
the request fields the comparators need (pure builders; the Lua lives in gateway/envoy/answer_filter.py).

Nothing here is built without `analysis.quality`: no capture Lua, no request filter, no route metadata,
so no answer content leaves Envoy.

Sampling is per request, on the route: each split route carries `names.CAPTURE_KEY` metadata under the
answer filter's name, which Lua reads with `handle:metadata()` (checked on Envoy 1.40): `ppm`, the share
of requests kept per million; `mirror`, true on a route that mirrors in a shadow stage; `bytes`, the cap.
So the share follows the routes (RDS) on every phase or weight change, and the listener stays as it was.
A request is kept when the first 8 hex digits of its x-request-id (Envoy's UUID), as an integer v, give
`v % 1e6 < ppm` (so any proxy, and the shadow hop, decide alike for one request), or always on a `mirror`
route: Envoy 1.40 picks the requests it mirrors at random, not by the request id (checked: with a 50 %
mirror the copies' ids matched no rule on the id's integer), so every original is kept there and those
whose copy was not mirrored expire unpaired in the gateway; the shadow hop's routes keep every copy
(`ppm` 1e6). The copy keeps the original's x-request-id across the hop (checked on Envoy
1.40: tests/integration/test_capture.py), which is how the gateway pairs them (gateway/answers/pairs.py).

The request side: json_to_metadata writes `temperature`, `response_format.type`, whether a JSON schema
and whether `tools` were given (the schema itself not: json_to_metadata 1.40 writes no object's value,
checked: a STRING rule on it wrote nothing; a constant on its presence works), into `names.CAPTURE_REQUEST_METADATA`, on bodies of at most six digits of
`content-length` only (as the affinity filter's, gateway/envoy/affinity_filter.py); a larger, chunked or
non-JSON body is passed on unread, never refused.
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2, extension_pb2
from envoy.extensions.common.matching.v3 import extension_matcher_pb2
from envoy.extensions.filters.http.json_to_metadata.v3 import json_to_metadata_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import regex_pb2
from google.protobuf import struct_pb2

from gateway import names
from gateway.envoy.affinity_filter import small_body_only
from gateway.envoy.answer_filter import FILTER_NAME
from gateway.envoy.common import any_proto
from gateway.spec.quality import Quality

REQUEST_FILTER = "graystack.capture.request"
_J = json_to_metadata_pb2.JsonToMetadata
# body path -> (metadata key, the value's type, a constant written instead of the value)
_REQUEST_FIELDS: dict[str, tuple[str, int, bool | None]] = {
    "temperature": ("temperature", _J.NUMBER, None),
    "response_format.type": ("response_format", _J.STRING, None),
    "response_format.json_schema.schema": ("schema", _J.PROTOBUF_VALUE, True),
    "tools": ("tools", _J.PROTOBUF_VALUE, True),
}


def capture_metadata(quality: Quality | None, mirror_percent: int = 0) -> base_pb2.Metadata | None:
    """A split route's sampling (the module's docstring); None without `quality`. `mirror_percent`: the
    share the route mirrors, whose originals are all kept in a shadow stage (`quality.shadow`)."""
    if quality is None:
        return None
    rule = struct_pb2.Struct()
    rule.update(
        {
            "ppm": quality.live_per_million,
            "mirror": quality.shadow and mirror_percent > 0,
            "bytes": quality.max_answer_bytes,
        }
    )
    fields = {names.CAPTURE_KEY: struct_pb2.Value(struct_value=rule)}
    return base_pb2.Metadata(filter_metadata={FILTER_NAME: struct_pb2.Struct(fields=fields)})


def shadow_capture_metadata(quality: Quality | None) -> base_pb2.Metadata | None:
    """The shadow hop's routes: every mirrored copy kept (`quality.shadow`), else the live share."""
    if quality is None:
        return None
    if not quality.shadow:
        return capture_metadata(quality)
    return capture_metadata(quality.model_copy(update={"capture_percent": 100.0}))


def _request_rules() -> json_to_metadata_pb2.JsonToMetadata:
    rules = []
    for path, (key, kind, constant) in _REQUEST_FIELDS.items():
        value = None if constant is None else struct_pb2.Value(bool_value=constant)
        rules.append(
            _J.Rule(
                selectors=[_J.Selector(key=k) for k in path.split(".")],
                on_present=_J.KeyValuePair(
                    metadata_namespace=names.CAPTURE_REQUEST_METADATA, key=key, type=kind, value=value
                ),
            )
        )
    return _J(
        request_rules=_J.MatchRules(
            rules=rules,
            allow_content_types_regex=regex_pb2.RegexMatcher(regex=".*"),
            allow_empty_content_type=True,
        )
    )


def build_request_filter(quality: Quality | None) -> list[hcm_pb2.HttpFilter]:
    """json_to_metadata over small request bodies (the module's docstring); none without `quality`."""
    if quality is None:
        return []
    config = extension_pb2.TypedExtensionConfig(
        name="envoy.filters.http.json_to_metadata", typed_config=any_proto(_request_rules())
    )
    wrapped = extension_matcher_pb2.ExtensionWithMatcher(
        extension_config=config, xds_matcher=small_body_only()
    )
    return [hcm_pb2.HttpFilter(name=REQUEST_FILTER, typed_config=any_proto(wrapped))]
