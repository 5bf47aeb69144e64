"""The Control plane dashboard: the xDS control plane from both ends."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import stat

from gateway.families import (
    SPEC_RELOADS,
    XDS_ACK_SECONDS,
    XDS_CONNECTED_PROXIES,
    XDS_CONVERGED_PROXIES,
    XDS_NACKS,
    XDS_PUSHES,
)
from graystack.observability.dashboards.panels import QUANTILES, base, graph, query, with_queries
from graystack.observability.promql import NAMESPACE, RATE, quantile, rate


def control_plane() -> gd.Dashboard:
    board = base(
        "graystack-control-plane",
        "graystack / Control plane",
        "The xDS control plane from both ends: the gateway's streams, pushes, NACKs and ACK latency, "
        "and each Envoy's own view of its connection and rejected updates.",
    )
    connected = (
        stat.Panel()
        .title("Connected and converged proxies")
        .reduce_options(gc.ReduceDataOptions().calcs(["lastNotNull"]))
        .description(
            "ADS streams open from Envoy proxies now (0: no proxy gets any change), and how many of "
            "them ACKed the latest version of every type."
        )
    )
    proxies = [
        query(f"sum({family}{{{NAMESPACE}}})", state)
        for family, state in ((XDS_CONNECTED_PROXIES, "connected"), (XDS_CONVERGED_PROXIES, "converged"))
    ]
    board.with_panel(with_queries(connected, *proxies).span(6).height(8))
    board.with_panel(
        graph(
            "Envoy: connected to the control plane",
            "short",
            "Each Envoy's control_plane.connected_state (1: its ADS stream is up).",
            query(f"envoy_control_plane_connected_state{{{NAMESPACE}}}", "{{instance}}"),
        ).span(18)
    )
    board.with_panel(
        graph(
            "Pushes per second by type",
            "short",
            "DiscoveryResponses sent (listeners, routes, clusters, endpoints).",
            query(rate(XDS_PUSHES, NAMESPACE, "type"), "{{type}}"),
        )
    )
    board.with_panel(
        graph(
            "NACKs by type (gateway)",
            "short",
            "DiscoveryResponses a proxy rejected: the proxy keeps its last good config.",
            query(f"sum by (type) (increase({XDS_NACKS}{{{NAMESPACE}}}[{RATE}]))", "{{type}}"),
        )
    )
    board.with_panel(
        graph(
            "Rejected updates (Envoy's view)",
            "short",
            "Updates each Envoy refused, by API; the gateway's NACK count, seen from the proxy.",
            query(
                f"sum by (instance) (envoy_listener_manager_lds_update_rejected{{{NAMESPACE}}})",
                "{{instance}} LDS",
            ),
            query(f"sum by (instance) (envoy_http_rds_update_rejected{{{NAMESPACE}}})", "{{instance}} RDS"),
            query(
                f"sum by (instance) (envoy_cluster_manager_cds_update_rejected{{{NAMESPACE}}})",
                "{{instance}} CDS",
            ),
            query(f"sum by (instance) (envoy_cluster_update_rejected{{{NAMESPACE}}})", "{{instance}} EDS"),
        )
    )
    board.with_panel(
        graph(
            "ACK latency",
            "s",
            "From sending a DiscoveryResponse to the proxy's ACK.",
            *(
                query(quantile(q, XDS_ACK_SECONDS, NAMESPACE, "namespace"), f"p{round(q * 100)}")
                for q in QUANTILES
            ),
        )
    )
    board.with_panel(
        graph(
            "Spec reloads by result",
            "short",
            "Spec changes applied or refused (a refused spec leaves the last good one live).",
            query(
                f"sum by (result) (increase({SPEC_RELOADS}{{{NAMESPACE}}}[{RATE}]))",
                "{{result}}",
            ),
        )
    )
    return board
