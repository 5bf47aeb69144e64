"""The answer filter's capture code (Lua), added to its script only where the spec has `analysis.quality`
(gateway/envoy/answer_filter.py; which requests, and why so: gateway/envoy/capture.py).

envoy_on_request samples the request by its route's `capture` metadata and its x-request-id, and marks a
sampled one in the answer's dynamic metadata (`capture`: the byte cap). On the response, for a sampled
request only:
    a stream      each content event's generated text, as the server escaped it in its JSON string (the
                  gateway unescapes it, gateway/answers/capture.py): a chat chunk's `content` (or a
                  completion's `text`), a Messages `text_delta`, a Responses `response.output_text.delta`;
                  tool-call arguments apart (`arguments`, `partial_json`, `response.function_call_
                  arguments.delta`)
    a whole body  its first bytes, raw (`raw`: the gateway extracts the text from the JSON)
Both stop at the cap: `truncated` says so, and the bytes past it are never kept. A cut never splits a UTF-8
character; text that is not UTF-8 (protobuf strings must be) is dropped and `unreadable` set instead, so
the access log never carries bytes the gateway cannot parse.
"""

from __future__ import annotations

CAPTURE_LUA = r"""
local function sample(id, rule)
  local v = tonumber((id or ""):match("^(%x%x%x%x%x%x%x%x)") or "", 16)
  if not v then return false end
  return v % 1000000 < (tonumber(rule.ppm) or 0)
end

function envoy_on_request(handle)
  local rule = handle:metadata():get(CAPTURE_KEY)
  if rule and (rule.mirror == true or sample(handle:headers():get("x-request-id"), rule)) then
    handle:streamInfo():dynamicMetadata():set(NS, "capture", tonumber(rule.bytes) or 0)
  end
end

local function json_string(payload, key)
  local _, stop = payload:find('"' .. key .. '"%s*:%s*"')
  if not stop then return nil end
  local i = stop + 1
  while true do
    local j = payload:find('["\\]', i)
    if not j then return payload:sub(stop + 1) end
    if payload:sub(j, j) == '"' then return payload:sub(stop + 1, j - 1) end
    i = j + 2
  end
end

local function keep(s, part, text)
  if not text or text == "" then return end
  local room = s.cap - s.kept
  if #text > room then
    s.truncated = true
    -- never end inside a UTF-8 character: back off over continuation bytes
    while room > 0 and (text:byte(room + 1) or 0) >= 128 and (text:byte(room + 1) or 0) < 192 do
      room = room - 1
    end
    text = text:sub(1, room)
  end
  if text == "" then return end
  table.insert(s[part], text)
  s.kept = s.kept + #text
end

local function keep_event(s, kind, payload)
  if kind == "content_block_delta" then
    keep(s, "text", json_string(payload, "text"))
    keep(s, "calls", json_string(payload, "partial_json"))
  elseif kind == "response.output_text.delta" then keep(s, "text", json_string(payload, "delta"))
  elseif kind == "response.function_call_arguments.delta" then keep(s, "calls", json_string(payload, "delta"))
  elseif not kind and payload:find('"choices"') then
    keep(s, "text", json_string(payload, "content") or json_string(payload, "text"))
    keep(s, "calls", json_string(payload, "arguments"))
  end
end

local function utf8_valid(t)
  local i, n, byte = 1, #t, string.byte
  while true do
    i = t:find("[\128-\255]", i)
    if not i then return true end
    local c, len = byte(t, i), 0
    if c >= 194 and c <= 223 then len = 2 elseif c >= 224 and c <= 239 then len = 3
    elseif c >= 240 and c <= 244 then len = 4 else return false end
    if i + len - 1 > n then return false end
    local lo, hi = 128, 191
    if c == 224 then lo = 160 elseif c == 237 then hi = 159 elseif c == 240 then lo = 144 elseif c == 244 then hi = 143 end
    local c2 = byte(t, i + 1)
    if c2 < lo or c2 > hi then return false end
    for k = i + 2, i + len - 1 do
      local ck = byte(t, k)
      if ck < 128 or ck > 191 then return false end
    end
    i = i + len
  end
end

local function captured(s, sse)
  local text, calls = table.concat(s.text), table.concat(s.calls)
  if not (utf8_valid(text) and utf8_valid(calls)) then
    return { unreadable = true, truncated = s.truncated == true, raw = not sse }
  end
  return { text = text, calls = calls, truncated = s.truncated == true, raw = not sse }
end
"""

NO_CAPTURE_LUA = r"""
local function keep() end
local function keep_event() end
local function captured() return nil end
"""
