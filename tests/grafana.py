"""Reading `deploy/grafana/strait.json`: its panels, their PromQL, and the metric names that PromQL names.

Shared by the fast unit test (the JSON is a sound dashboard over declared metrics) and the
integration test (a running controller and worker export every one of those metrics).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy/grafana/strait.json"

# Words of PromQL that read like identifiers but are not metric names.
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
    | {"inf", "nan"}
)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Sample names a metric family of each type puts in Prometheus (the parser names counter
# families without their "_total", histogram families without "_bucket"/"_sum"/"_count").
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count"),
}


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, including those inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") != "row":
            yield panel
        yield from (p for p in panel.get("panels", []) if p.get("type") != "row")


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    out = [(f"panel {p.get('title')!r}", t.get("expr", "")) for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            text = query.get("query", "") if isinstance(query, dict) else str(query or "")
            out.append((f"variable ${variable.get('name')}", text))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or Grafana's `label_values(...)`) selects.

    Grafana variables, strings, label matchers, ranges, label lists of `by`/`on`/... and
    numbers are removed first; what remains that is neither a function call nor a keyword is a
    metric name.
    """
    text = re.sub(r"\$\{[^}]*\}|\$\w+", " ", expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', " ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    # label_values(metric, label): the second argument is a label, not a metric.
    text = re.sub(r"\blabel_values\s*\(([^,()]*),\s*\w+\s*\)", r"(\1)", text)
    text = re.sub(r"(?<![\w.])\d[\w.]*(?:[eE][+-]?\d+)?", " ", text)  # numbers and durations
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        if word.lower() in _KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def exported(text: str) -> tuple[set[str], set[str]]:
    """(names Prometheus can store from this /metrics page, the subset with samples now).

    A family is declared by its TYPE line even with no series yet; the first set holds the
    sample names each declared family's type gives it.
    """
    declared: set[str] = set()
    present: set[str] = set()
    for family in text_string_to_metric_families(text):
        declared |= {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
        present |= {sample.name for sample in family.samples}
    return declared, present
