"""The Grafana dashboards in deploy/grafana: valid JSON, provisioned, and querying only metrics the services emit.

"Emitted" means defined in the metrics catalog (``oncelog.telemetry.metrics``), translated to the names and
labels Prometheus' OTLP receiver stores them under. Labels may also come from the resource attributes the
Prometheus component promotes (``otlp.promote_resource_attributes``), plus ``job``/``instance``, which every
OTLP series carries, and ``le`` on histogram buckets. PromQL is not parsed fully: metric names, selector
matchers, ``by``/``without`` clauses, ``label_values()`` and legend templates are enough to catch a renamed
metric or a misspelt label, which otherwise shows up only as an empty panel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.telemetry.metrics import CATALOG, MetricDefinition, prometheus_label

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the kustomization (pip install pyyaml)")

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
PROMETHEUS_CONFIG = ROOT / "deploy" / "k8s" / "components" / "prometheus" / "prometheus-config.yaml"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))

_METRIC = re.compile(r"\b(oncelog_[A-Za-z0-9_:]*)")
_SELECTOR = re.compile(r"\b(oncelog_[A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"label_values\(\s*(oncelog_[A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


# ---- what the services emit --------------------------------------------------------------------------------------


def series_catalog() -> dict[str, MetricDefinition]:
    """Every Prometheus series name of the catalog -> its definition."""
    return {series: d for d in CATALOG for series in d.prometheus_series}


def resource_labels() -> set[str]:
    """Labels every oncelog series carries in Prometheus, besides its attributes."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    promoted = config.get("otlp", {}).get("promote_resource_attributes", [])
    return {"job", "instance", *(prometheus_label(a) for a in promoted)}


def labels_of(series: str) -> set[str]:
    """The labels a query may use on ``series``."""
    definition = series_catalog()[series]
    extra = {"le"} if series.endswith("_bucket") else set()
    return set(definition.prometheus_labels) | resource_labels() | extra


# ---- what the dashboards query -------------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """A dashboard's JSON."""
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    stack = list(dashboard.get("panels", []))
    while stack:
        panel = stack.pop(0)
        yield panel
        stack.extend(panel.get("panels", []))


def prometheus_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(where, PromQL, legend template) of every Prometheus target and query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if "expr" in target:
                yield (
                    f"panel {panel['id']} ({panel.get('title')}) {target.get('refId')}",
                    target["expr"],
                    (target.get("legendFormat", "")),
                )
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else (query or "")
        for expr in {text, variable.get("definition", "")} - {""}:
            yield f"variable ${variable['name']}", expr, ""


def query_problems(expr: str, legend: str) -> list[str]:
    """Metric names and labels in ``expr`` (and ``legend``) that the catalog does not define."""
    known = series_catalog()
    metrics = set(_METRIC.findall(expr))
    problems = [f"{m} is no metric of oncelog.telemetry.metrics" for m in sorted(metrics - set(known))]
    if problems:
        return problems
    for metric, matchers in _SELECTOR.findall(expr):
        for label in _MATCHER.findall(matchers):
            if label not in labels_of(metric):
                problems.append(f"{metric} has no label {label!r}")
    available = set().union(*(labels_of(m) for m in metrics)) if metrics else set()
    grouped: set[str] = set()
    for clause in _GROUPING.findall(expr):
        labels = {label.strip() for label in clause.split(",") if label.strip()}
        grouped |= labels
        problems += [f"grouping by {label!r}, which none of {sorted(metrics)} has" for label in labels - available]
    for metric, label in _LABEL_VALUES.findall(expr):
        if label not in labels_of(metric):
            problems.append(f"label_values: {metric} has no label {label!r}")
    # after an aggregation only the grouping labels survive; without one, the metrics' own labels do
    legend_labels = set(_LEGEND.findall(legend))
    survivors = grouped or available
    problems += [f"legend uses {{{{{label}}}}}, which the query does not return" for label in legend_labels - survivors]
    return problems


# ---- tests ---------------------------------------------------------------------------------------------------------


def test_there_are_dashboards() -> None:
    assert DASHBOARDS, "deploy/grafana holds no dashboard"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_valid_json_with_unique_panel_ids(path: Path) -> None:
    dashboard = load(path)
    assert dashboard.get("uid") and dashboard.get("title"), "a provisioned dashboard needs a uid and a title"
    ids = [panel.get("id") for panel in panels(dashboard)]
    assert ids and all(isinstance(i, int) for i in ids), f"every panel needs a numeric id: {ids}"
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate panel ids {duplicates}"
    for panel in panels(dashboard):
        assert {"type", "gridPos"} <= set(panel), f"panel {panel['id']} lacks a type or position"


def test_dashboard_uids_and_titles_are_unique() -> None:
    dashboards = [load(p) for p in DASHBOARDS]
    uids = [d["uid"] for d in dashboards]
    titles = [d["title"] for d in dashboards]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)


def test_every_dashboard_is_provisioned() -> None:
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text())
    files = {f for generator in kustomization["configMapGenerator"] for f in generator.get("files", [])}
    assert files == {p.name for p in DASHBOARDS}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_queried_metric_and_label_is_emitted(path: Path) -> None:
    problems = [
        f"{where}: {problem}"
        for where, expr, legend in prometheus_queries(load(path))
        for problem in query_problems(expr, legend)
    ]
    assert not problems, "\n".join(problems)


def test_every_catalog_metric_is_on_a_dashboard() -> None:
    queried = {
        metric
        for path in DASHBOARDS
        for _, expr, _ in prometheus_queries(load(path))
        for metric in _METRIC.findall(expr)
    }
    catalog = series_catalog()
    shown = {catalog[m].name for m in queried if m in catalog}
    assert shown == {d.name for d in CATALOG}, f"not on any dashboard: {sorted({d.name for d in CATALOG} - shown)}"


@pytest.mark.parametrize(
    ("expr", "legend", "problem"),
    [
        ("sum(rate(oncelog_produce_record_total[5m]))", "", "oncelog_produce_record_total is no metric"),
        ('oncelog_partition_lso_lag{topik="a"}', "", "has no label 'topik'"),
        ("sum by (rpc_methd) (oncelog_rpc_server_duration_seconds_count)", "", "grouping by 'rpc_methd'"),
        ("sum by (topic) (oncelog_produce_bytes_total)", "{{partition}}", "legend uses {{partition}}"),
        ("label_values(oncelog_fetch_records_total, isolaton)", "", "has no label 'isolaton'"),
        ("oncelog_rpc_server_duration_seconds", "", "is no metric"),
    ],
)
def test_the_check_finds_broken_queries(expr: str, legend: str, problem: str) -> None:
    problems = query_problems(expr, legend)
    assert any(problem in p for p in problems), problems


def test_the_check_accepts_catalog_queries() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, rpc_method) "
        '(rate(oncelog_rpc_server_duration_seconds_bucket{rpc_grpc_status_code="0"}[5m])))'
    )
    assert query_problems(expr, "{{rpc_method}}") == []
