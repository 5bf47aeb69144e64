"""Plain-text rendering of the gateway's status, for `graystack status`."""

from __future__ import annotations


def _split(weights: dict[str, int]) -> str:
    return "  ".join(f"{variant} {percent}%" for variant, percent in sorted(weights.items()))


def render_status(status: dict) -> str:
    lines = [f"rollout   {status['rollout']}  (config generation {status['generation']})"]
    spec = status["spec"]
    error = spec["last_error"]
    lines.append(
        f"spec      {spec['path']}: "
        + (f"REFUSED, last good still live: {error['message']}" if error else "ok")
    )
    routing = status["routing"]
    if routing:
        flipped = routing["flipped"]
        lines.append(
            f"split     {_split(routing['weights'])}" + ("  (operator flip)" if "default" in flipped else "")
        )
        for rule in routing["rules"]:
            note = "  (operator flip)" if rule["value"] in flipped else ""
            lines.append(f"  {routing['header']}: {rule['value']:<12} -> {_split(rule['weights'])}{note}")
        if routing["fallback"]:
            lines.append(f"fallback  failed attempts retry on {routing['fallback']}")
    xds = status["xds"]
    proxies = xds["proxies"]
    state = "converged" if xds["converged"] else "NOT converged"
    lines.append(f"proxies   {len(proxies)} connected, {state}")
    for proxy in proxies:
        lines.append(f"  {proxy['node']} ({proxy['peer']})")
        for short, info in proxy["types"].items():
            mark = "ACKed" if info["acked"] == info["current"] else f"acked {info['acked'] or '-'}"
            lines.append(f"    {short}  {info['current']}  {mark}")
            nack = info["last_nack"]
            if nack:
                verdict = "REJECTED (serving the last ACKed version)" if info["rejected"] else "earlier NACK"
                lines.append(f"      {verdict}: version {nack['version']}: {nack['message']}")
    return "\n".join(lines)
