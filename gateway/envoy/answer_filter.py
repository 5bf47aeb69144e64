"""The measurement of every answer, in the data plane: a Lua filter over the response body as it streams.

Why Lua (checked against Envoy 1.40's binary here): `bodyChunks()` yields each chunk to the script and
passes it on at once, buffering nothing (a client saw 200 ms-spaced SSE events 200 ms apart through it), and
`timestampString(MICROSECOND)` reads the same system clock as the access log's request start, in µs.
`ext_proc` in observability mode would ship every body byte to the gateway; `json_to_metadata` reads
only whole JSON bodies; `sse_to_metadata` is not in 1.40.

What the script writes, as dynamic metadata under `names.ANSWER_METADATA` (the access log carries it to the
gateway, gateway/envoy/answer_log.py):
    first_us   µs since the epoch at the first event carrying generated content (a chat chunk with
               non-empty `content`, `reasoning_content`, `text` or `tool_calls`; a Messages
               `content_block_delta`; a Responses `response.output_text.delta` and the other `*.delta`
               events of RESPONSE_CONTENT), or at the first body byte of a non-streamed answer. Written
               the moment it is seen, so a stream the client abandons keeps it.
    end        at the response's last byte (absent when the stream was reset: cut or client gone):
      last_us     µs at the last content event
      content     content events seen (the token count where the server sends no `usage`)
      input, output   the last `usage` counts seen (prompt/completion or input/output tokens)
      finish      the raw finish or stop reason
      final       a stream's final event arrived (`[DONE]`, `message_stop`, `response.completed`,
                  `response.incomplete`) or, on a chat stream
                  that omits `[DONE]` (transformers serve), a `finish_reason`
      error       the error type of an `event: error`, a `{"error": ...}` chunk or body, a `response.failed`
      capture     only for a request sampled for answer capture (gateway/envoy/capture.py): `text`, `calls`,
                  `truncated`, `raw`, `unreadable` (gateway/envoy/capture_lua.py)
      sse         the body was `text/event-stream`
      unknown     data events the script could not place; malformed: lines it could not read
The script never fails a request: parsing runs under `pcall`, a line over MAX_LINE is dropped and
counted, a non-streamed body is kept only up to its last BODY_TAIL bytes (the usage sits at its end).
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from gateway import names
from gateway.envoy.capture_lua import CAPTURE_LUA, NO_CAPTURE_LUA
from gateway.envoy.common import any_proto

FILTER_NAME = "envoy.filters.http.lua"
MAX_LINE = 262_144
BODY_TAIL = 65_536

_SCRIPT_BODY = r"""

local function now_us(handle)
  return tonumber(handle:timestampString(EnvoyTimestampResolution.MICROSECOND))
end

local function usage(s, payload)
  local input = payload:match('"prompt_tokens"%s*:%s*(%d+)') or payload:match('"input_tokens"%s*:%s*(%d+)')
  local output = payload:match('"completion_tokens"%s*:%s*(%d+)')
    or payload:match('"output_tokens"%s*:%s*(%d+)')
  if input then s.input = tonumber(input) end
  if output then s.output = tonumber(output) end
  local finish = payload:match('"finish_reason"%s*:%s*"([%w_]+)"') or payload:match('"stop_reason"%s*:%s*"([%w_]+)"')
  if finish then s.finish = finish end
end

local function error_type(payload)
  return payload:match('"error"%s*:%s*{.-"type"%s*:%s*"([%w_]+)"')
    or payload:match('"error"%s*:%s*{.-"code"%s*:%s*"?([%w_]+)"?') or "error"
end

local function has_content(payload)
  return payload:find('"content"%s*:%s*"[^"]') or payload:find('"reasoning_content"%s*:%s*"[^"]')
    or payload:find('"text"%s*:%s*"[^"]') or payload:find('"tool_calls"%s*:%s*%[%s*{')
end

local function content(handle, s)
  local t = now_us(handle)
  s.content = s.content + 1
  s.last_us = t
  if not s.first_us then
    s.first_us = t
    handle:streamInfo():dynamicMetadata():set(NS, "first_us", t)
  end
end

-- The Responses API's events that carry generated content; its other `response.*` events carry none.
local RESPONSE_CONTENT = {
  ["response.output_text.delta"] = true, ["response.refusal.delta"] = true,
  ["response.reasoning_text.delta"] = true, ["response.reasoning_summary_text.delta"] = true,
  ["response.function_call_arguments.delta"] = true,
}

local function on_data(handle, s, event, payload)
  if payload == "[DONE]" then s.final = true return end
  -- a Responses event's type may come after its other fields, and without an `event:` line (transformers
  -- serve); no nested object's type starts with `response.`
  local kind = event or payload:match('^%s*{%s*"type"%s*:%s*"([%w_.]+)"')
    or payload:match('"type"%s*:%s*"(response%.[%w_.]+)"')
  if s.cap then keep_event(s, kind, payload) end
  if kind == "content_block_delta" or RESPONSE_CONTENT[kind] then content(handle, s)
  elseif kind == "response.completed" then
    usage(s, payload)
    s.finish = "completed"
    s.final = true
  elseif kind == "response.incomplete" then
    usage(s, payload)
    s.finish = payload:match('"incomplete_details"%s*:%s*{%s*"reason"%s*:%s*"([%w_]+)"') or "incomplete"
    s.final = true
  elseif kind == "response.failed" then s.error = error_type(payload)
  elseif kind and kind:find("^response%.") then return
  elseif kind == "message_start" then s.input = tonumber(payload:match('"input_tokens"%s*:%s*(%d+)'))
  elseif kind == "message_delta" then usage(s, payload)
  elseif kind == "message_stop" then s.final = true
  elseif kind == "error" then s.error = error_type(payload)
  elseif kind == "ping" or kind == "content_block_start" or kind == "content_block_stop" then return
  elseif payload:find('^%s*{%s*"error"%s*:') then s.error = error_type(payload)
  elseif payload:find('"choices"') then
    if has_content(payload) then content(handle, s) end
    usage(s, payload)
    if s.finish then s.finished = true end
  else s.unknown = s.unknown + 1
  end
end

local function on_line(handle, s, line)
  if line:sub(-1) == "\r" then line = line:sub(1, -2) end
  if line == "" then s.event = nil return end
  local payload = line:match("^data:%s?(.*)$")
  if payload then on_data(handle, s, s.event, payload) return end
  local event = line:match("^event:%s*(.-)%s*$")
  if event then s.event = event return end
  if line:sub(1, 1) ~= ":" and not line:find("^id:") and not line:find("^retry:") then
    s.malformed = s.malformed + 1
  end
end

local function on_sse(handle, s, bytes)
  local buffer = s.pending .. bytes
  local start = 1
  while true do
    local newline = buffer:find("\n", start, true)
    if not newline then break end
    on_line(handle, s, buffer:sub(start, newline - 1))
    start = newline + 1
  end
  s.pending = buffer:sub(start)
  if #s.pending > MAX_LINE then
    s.pending = ""
    s.malformed = s.malformed + 1
  end
end

local function on_body(handle, s, bytes)
  if not s.first_us and #bytes > 0 then
    s.first_us = now_us(handle)
    handle:streamInfo():dynamicMetadata():set(NS, "first_us", s.first_us)
  end
  if s.cap then keep(s, "text", bytes) end
  s.size = s.size + #bytes
  table.insert(s.body, bytes)
  if s.size > 2 * BODY_TAIL then
    local kept = table.concat(s.body)
    s.body = { kept:sub(-BODY_TAIL) }
    s.size = BODY_TAIL
  end
end

local function on_json_end(s)
  local body = table.concat(s.body)
  if body:find('^%s*{%s*"error"%s*:') or body:find('^%s*{%s*"type"%s*:%s*"error"') then
    s.error = error_type(body)
    return
  end
  usage(s, body)
  s.content = (has_content(body) and 1) or 0
end

function envoy_on_response(handle)
  local sse = (handle:headers():get("content-type") or ""):find("text/event-stream", 1, true) ~= nil
  local s = { pending = "", body = {}, size = 0, content = 0, unknown = 0, malformed = 0, parse_errors = 0,
    text = {}, calls = {}, kept = 0 }
  if CAPTURE then
    local marked = handle:streamInfo():dynamicMetadata():get(NS)
    s.cap = marked and tonumber(marked.capture)
  end
  for chunk in handle:bodyChunks() do
    local ok = pcall(function()
      local bytes = chunk:getBytes(0, chunk:length())
      if sse then on_sse(handle, s, bytes) else on_body(handle, s, bytes) end
    end)
    if not ok then s.parse_errors = s.parse_errors + 1 end
  end
  local ok = pcall(function()
    if sse then
      if #s.pending > 0 then on_line(handle, s, s.pending) end
      s.final = s.final or s.finished or false
    else
      on_json_end(s)
    end
  end)
  if not ok then s.parse_errors = s.parse_errors + 1 end
  local kept = nil
  if s.cap then
    ok = pcall(function() kept = captured(s, sse) end)
    if not ok then kept = { unreadable = true } end
  end
  handle:streamInfo():dynamicMetadata():set(NS, "end", {
    last_us = s.last_us, content = s.content, input = s.input, output = s.output, finish = s.finish,
    final = s.final == true, error = s.error, sse = sse, unknown = s.unknown, malformed = s.malformed,
    parse_errors = s.parse_errors, capture = kept,
  })
end
"""


def answer_script(capture: bool = False) -> str:
    """The filter's script; `capture`: with the code that keeps sampled answers (gateway/envoy/capture_lua.py),
    only where the spec has `analysis.quality`."""
    return (
        f'local NS = "{names.ANSWER_METADATA}"\nlocal MAX_LINE = {MAX_LINE}\nlocal BODY_TAIL = {BODY_TAIL}\n'
        f'local CAPTURE = {"true" if capture else "false"}\nlocal CAPTURE_KEY = "{names.CAPTURE_KEY}"\n'
        + (CAPTURE_LUA if capture else NO_CAPTURE_LUA)
        + _SCRIPT_BODY
    )


def build_answer_filter(capture: bool = False) -> hcm_pb2.HttpFilter:
    """The Lua filter, placed before the router so it sees every answer the router sends back."""
    script = base_pb2.DataSource(inline_string=answer_script(capture))
    return hcm_pb2.HttpFilter(
        name=FILTER_NAME, typed_config=any_proto(lua_pb2.Lua(default_source_code=script))
    )
