"""What `graystack render` needs besides the spec, read from the command line's words: where graystack
receives the answer log (a Service, since both gateways reference their log sink by Service), the Gateway
whose proxies send it, and the answer filter's script where it is attached. A bad word is refused naming
its option, before anything is built."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.spec.gateway_api import DNS_LABEL, DNS_SUBDOMAIN

# A Service's name is a DNS-1035 label: it starts with a letter, so an IP address is never read as one.
SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
CLUSTER_DOMAIN = "cluster.local"
ALS_EXAMPLE = "graystack-gateway-admin.graystack:18000"


class RenderError(ValueError):
    """The objects cannot be rendered as asked; the message names the input that is wrong."""


@dataclass(frozen=True)
class ServiceAddress:
    """graystack's answer-log receiver (the xDS port of the chart's leader-only Service, where the gRPC
    access-log service is served: a follower refuses the log)."""

    name: str
    namespace: str
    port: int
    domain: str = CLUSTER_DOMAIN

    @property
    def host(self) -> str:
        """The Service's fully qualified name, as Istio's extension providers want it."""
        return f"{self.name}.{self.namespace}.svc.{self.domain}"


@dataclass(frozen=True)
class GatewayRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class RenderOptions:
    """`answer_filter`: the answer filter's Lua source (gateway/envoy/answer_filter.py's `answer_script()`,
    given by the caller: the builders' floor keeps envoy/ and gatewayapi/ apart); None: not attached."""

    als: ServiceAddress
    gateway: GatewayRef
    answer_filter: str | None = None


def service_address(text: str) -> ServiceAddress:
    """`SERVICE.NAMESPACE[.svc[.DOMAIN]]:PORT`; RenderError naming `--als` otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise RenderError(
            f"--als {text!r}: expected SERVICE.NAMESPACE:PORT (a port 1-65535), e.g. {ALS_EXAMPLE}"
        )
    labels = host.split(".")
    named = len(labels) >= 2 and SERVICE_NAME.match(labels[0]) and re.match(DNS_LABEL, labels[1])
    qualified = len(labels) == 2 or (len(labels) > 2 and labels[2] == "svc")
    domain = ".".join(labels[3:]) or CLUSTER_DOMAIN
    if not named or not qualified or not re.match(DNS_SUBDOMAIN, domain):
        raise RenderError(
            f"--als {text!r}: graystack's answer log is received by a Service: name it with its namespace, "
            f"SERVICE.NAMESPACE[.svc[.DOMAIN]]:PORT, e.g. {ALS_EXAMPLE}"
        )
    return ServiceAddress(labels[0], labels[1], int(port), domain)


def gateway_ref(text: str) -> GatewayRef:
    """`NAMESPACE/NAME`; RenderError naming `--gateway-name` otherwise."""
    namespace, slash, name = text.partition("/")
    if not slash or not re.match(DNS_LABEL, namespace) or not re.match(DNS_SUBDOMAIN, name):
        raise RenderError(f"--gateway-name {text!r}: expected NAMESPACE/NAME of a Gateway, e.g. infra/eg")
    return GatewayRef(namespace, name)
