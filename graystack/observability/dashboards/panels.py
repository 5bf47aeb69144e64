"""What every graystack dashboard is built from: one Prometheus data source chosen by the `datasource`
variable, the `namespace` -> `rollout` -> `variant` filters (see promql.py for why `.*` is their "All"),
and a time series with a table legend so variants compare at a glance."""

from __future__ import annotations

from typing import TypeVar

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

from gateway.families import ROLLOUT_WEIGHT
from graystack.observability.promql import NAMESPACE, ROLLOUT, VARIANT, quantile

P = TypeVar("P", timeseries.Panel, stat.Panel, statetimeline.Panel, table.Panel)
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
QUANTILES = (0.5, 0.95, 0.99)


def query(expr: str, legend: str = "") -> prometheus.Dataquery:
    built = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    return built.legend_format(legend) if legend else built


def with_queries(panel: P, *queries: prometheus.Dataquery) -> P:
    """The panel reading `queries` from the chosen data source, each with its own refId (A, B, ...)."""
    refs: list[cogbuilder.Builder[cogvariants.Dataquery]] = [
        q.ref_id(chr(ord("A") + index)) for index, q in enumerate(queries)
    ]
    return panel.datasource(DATASOURCE).targets(refs)


def graph(title: str, unit: str, description: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    """A time series with a table legend (mean, max, last): variants compare at a glance."""
    legend = (
        gc.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
    )
    tooltip = gc.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
    panel = (
        timeseries.Panel().title(title).description(description).unit(unit).legend(legend).tooltip(tooltip)
    )
    return with_queries(panel, *queries).span(12).height(8)


def quantiles(title: str, histogram: str, description: str) -> timeseries.Panel:
    """p50/p95/p99 of a model-server histogram, one line per variant and quantile."""
    lines = [
        query(quantile(q, histogram, VARIANT, "variant"), f"{{{{variant}}}} p{round(q * 100)}")
        for q in QUANTILES
    ]
    return graph(title, "s", description, *lines)


def variables(source: str) -> list[cogbuilder.Builder[model.VariableModel]]:
    """datasource, then namespace -> rollout -> variant, each listing the values of `source`'s series
    that the previous ones select. "All" on namespace is `.*`, which also matches series without the
    label (the local stack's); on rollout and variant it is Grafana's union of the listed values, so a
    variant's regex matches its Envoy cluster and not `<variant>-with-fallback`."""

    def chained(name: str, selector: str, all_value: str | None = None) -> gd.QueryVariable:
        series = f"{source}{{{selector}}}" if selector else source
        variable = (
            gd.QueryVariable(name)
            .label(name.capitalize())
            .datasource(DATASOURCE)
            .query(f"label_values({series}, {name})")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        return variable.all_value(all_value) if all_value else variable

    return [
        gd.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        chained("namespace", "", all_value=".*"),
        chained("rollout", NAMESPACE),
        chained("variant", ROLLOUT),
    ]


def base(uid: str, title: str, description: str) -> gd.Dashboard:
    return (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["graystack"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone(common.TimeZoneBrowser)
        .variables(variables(ROLLOUT_WEIGHT))
    )
