"""The listener's affinity filters: they bring the client's key to the routes' hash policy, and the body
field the rules match (`routing.body`, e.g. `model`) to the routes' header matchers (pure).

Two filters, first in the chain (before anything that resolves the route), only when the spec names
`routing.affinity` sources or `routing.body` (neither: the chain is as it was):

1. json_to_metadata, only where a body field is wanted: it parses the request's JSON body and writes each
   field named into dynamic metadata (`names.AFFINITY_BODY_METADATA`, keyed by the dotted path).
   It is wrapped in a matcher that skips it unless the request's `content-length` has at most six digits
   (BODY_LIMIT, under Envoy's 1 MiB request buffer): json_to_metadata buffers the whole body, and a body
   past the buffer limit would be refused with 413. A larger body, or one without a length (chunked),
   is passed on unread and routed without a body key. A body that is not JSON is passed on as it is.
2. A Lua filter (headers only, it never reads or holds the body): it drops any `names.AFFINITY_HEADER` the
   client sent, takes the first source present (a header, a cookie, or a body field from the metadata
   above), writes its value into that header, names the source in `names.AFFINITY_METADATA` (`source`,
   e.g. `body:metadata.user_id`: the answer log carries it, so status can tell keyed requests from
   unkeyed ones); where the rules match a body field, it writes that field's value into
   `names.MATCH_HEADER` (again dropping a client's), which the rules' routes match; then it clears the
   route cache.

Why this and not `set_filter_state` + a hash policy on filter state (checked on Envoy 1.40's binary):
the connection manager resolves the route, weighted-cluster pick included, when the headers arrive,
before any filter runs, and set_filter_state cannot clear that choice; its `envoy.string` objects gave no
hash either (the split stayed random for a fixed key). Lua's `clearRouteCache()` makes the route, and so
the weighted cluster, be chosen again after the key is known, and a header hash works for every source
alike. json_to_metadata rather than Lua for the body: it parses JSON properly (Envoy's Lua has no JSON
parser), and the Lua filter reads only its result.
"""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.core.v3 import base_pb2, extension_pb2
from envoy.extensions.common.matching.v3 import extension_matcher_pb2
from envoy.extensions.filters.common.matcher.action.v3 import skip_action_pb2
from envoy.extensions.filters.http.json_to_metadata.v3 import json_to_metadata_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import http_inputs_pb2, regex_pb2
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2
from xds.type.matcher.v3 import regex_pb2 as xds_regex_pb2
from xds.type.matcher.v3 import string_pb2 as xds_string_pb2

from gateway import names
from gateway.envoy.common import any_proto
from gateway.spec.affinity import AffinitySource
from gateway.spec.model import Routing

BODY_FILTER = "graystack.affinity.body"
KEY_FILTER = "graystack.affinity.key"
BODY_LIMIT_DIGITS = 6
BODY_LIMIT = 10**BODY_LIMIT_DIGITS - 1  # bytes: the largest body read for a key

_SCRIPT_BODY = r"""
local function cookie(header, name)
  if not header then return nil end
  for pair in header:gmatch("[^;]+") do
    local key, value = pair:match("^%s*([^=%s]+)%s*=%s*(.-)%s*$")
    if key == name then return value end
  end
  return nil
end

local function present(value)
  if value == nil then return nil end
  value = tostring(value)
  if value == "" then return nil end
  return value
end

local function first_key(headers, body)
  for _, source in ipairs(SOURCES) do
    local value
    if source.kind == "header" then value = headers:get(source.name)
    elseif source.kind == "cookie" then value = cookie(headers:get("cookie"), source.name)
    else value = body[source.name] end
    value = present(value)
    if value then return value, source.label end
  end
  return nil, nil
end

function envoy_on_request(handle)
  local headers = handle:headers()
  headers:remove(KEY_HEADER)
  headers:remove(MATCH_HEADER)
  local info = handle:streamInfo():dynamicMetadata()
  local body = info:get(BODY_NS) or {}
  local matched = MATCH_PATH and present(body[MATCH_PATH])
  if matched then headers:add(MATCH_HEADER, matched) end
  local key, label = first_key(headers, body)
  if key then
    headers:add(KEY_HEADER, key)
    info:set(NS, "source", label)
  end
  if key or matched then handle:clearRouteCache() end
end
"""


def _lua_string(text: str) -> str:
    """A Lua string literal (the spec's names are tokens and dotted paths: no quotes or backslashes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def key_script(affinity: Sequence[AffinitySource], match_path: str | None = None) -> str:
    """The Lua filter's script: the sources in order and the matched body path (nil: none), then the code
    that takes the first source present."""
    sources = ", ".join(
        f"{{kind = {_lua_string(s.kind)}, name = {_lua_string(s.name)}, label = {_lua_string(s.label)}}}"
        for s in affinity
    )
    return (
        f"local KEY_HEADER = {_lua_string(names.AFFINITY_HEADER)}\n"
        f"local NS = {_lua_string(names.AFFINITY_METADATA)}\n"
        f"local BODY_NS = {_lua_string(names.AFFINITY_BODY_METADATA)}\n"
        f"local MATCH_HEADER = {_lua_string(names.MATCH_HEADER)}\n"
        f"local MATCH_PATH = {'nil' if match_path is None else _lua_string(match_path)}\n"
        f"local SOURCES = {{{sources}}}\n" + _SCRIPT_BODY
    )


def _body_rules(paths: Sequence[str]) -> json_to_metadata_pb2.JsonToMetadata:
    """Each path's value (a string, or a number as its text) under its own key; any content type, since
    clients often omit or misname it, and a body that does not parse is simply left unkeyed."""
    return json_to_metadata_pb2.JsonToMetadata(
        request_rules=json_to_metadata_pb2.JsonToMetadata.MatchRules(
            rules=[
                json_to_metadata_pb2.JsonToMetadata.Rule(
                    selectors=[json_to_metadata_pb2.JsonToMetadata.Selector(key=k) for k in path.split(".")],
                    on_present=json_to_metadata_pb2.JsonToMetadata.KeyValuePair(
                        metadata_namespace=names.AFFINITY_BODY_METADATA,
                        key=path,
                        type=json_to_metadata_pb2.JsonToMetadata.STRING,
                    ),
                )
                for path in paths
            ],
            allow_content_types_regex=regex_pb2.RegexMatcher(regex=".*"),
            allow_empty_content_type=True,
        )
    )


def small_body_only() -> matcher_pb2.Matcher:
    """Skip the wrapped filter unless `content-length` has at most BODY_LIMIT_DIGITS digits."""
    small = matcher_pb2.Matcher.MatcherList.Predicate.SinglePredicate(
        input=xds_extension_pb2.TypedExtensionConfig(
            name="content-length",
            typed_config=any_proto(http_inputs_pb2.HttpRequestHeaderMatchInput(header_name="content-length")),
        ),
        value_match=xds_string_pb2.StringMatcher(
            safe_regex=xds_regex_pb2.RegexMatcher(
                google_re2=xds_regex_pb2.RegexMatcher.GoogleRE2(), regex=f"^[0-9]{{1,{BODY_LIMIT_DIGITS}}}$"
            )
        ),
    )
    skip = matcher_pb2.Matcher.OnMatch(
        action=xds_extension_pb2.TypedExtensionConfig(
            name="skip", typed_config=any_proto(skip_action_pb2.SkipFilter())
        )
    )
    return matcher_pb2.Matcher(
        matcher_list=matcher_pb2.Matcher.MatcherList(
            matchers=[
                matcher_pb2.Matcher.MatcherList.FieldMatcher(
                    predicate=matcher_pb2.Matcher.MatcherList.Predicate(
                        not_matcher=matcher_pb2.Matcher.MatcherList.Predicate(single_predicate=small)
                    ),
                    on_match=skip,
                )
            ]
        )
    )


def build_affinity_filters(routing: Routing) -> list[hcm_pb2.HttpFilter]:
    """The filters the listener puts first (the module's docstring); none without affinity or `body`."""
    affinity = routing.affinity
    if not affinity and routing.body is None:
        return []
    filters = []
    paths = [source.name for source in affinity if source.kind == "body"]
    if routing.body is not None and routing.body not in paths:
        paths.append(routing.body)
    if paths:
        body = extension_pb2.TypedExtensionConfig(
            name="envoy.filters.http.json_to_metadata", typed_config=any_proto(_body_rules(paths))
        )
        filters.append(
            hcm_pb2.HttpFilter(
                name=BODY_FILTER,
                typed_config=any_proto(
                    extension_matcher_pb2.ExtensionWithMatcher(
                        extension_config=body, xds_matcher=small_body_only()
                    )
                ),
            )
        )
    script = base_pb2.DataSource(inline_string=key_script(affinity, routing.body))
    filters.append(
        hcm_pb2.HttpFilter(name=KEY_FILTER, typed_config=any_proto(lua_pb2.Lua(default_source_code=script)))
    )
    return filters
