"""`strait status`: the dashboard at a glance in the terminal (rich tables).

Reads the controller's `/observability`, the same figures the web dashboard shows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from strait.cli.topics import API_OPTION, CONFIG_OPTION, TOKEN_OPTION, api_call


def status(
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
    watch: bool = typer.Option(False, "--watch", "-w", help="Refresh every few seconds until Ctrl-C."),
    interval_s: float = typer.Option(2.0, "--interval", help="Seconds between refreshes with --watch."),
    as_json: bool = typer.Option(False, "--json", help="Print the controller's full view as one JSON object."),
) -> None:
    """Workers, routes, lag, latency, stuck partitions and balancing, at a glance."""
    if as_json:
        typer.echo(json.dumps(api_call(config, api, token, "GET", "/observability", params={"partitions": "true"})))
        return
    if not watch:
        Console().print(render(api_call(config, api, token, "GET", "/observability")))
        return
    with Live(render(api_call(config, api, token, "GET", "/observability")), auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval_s)
                live.update(render(api_call(config, api, token, "GET", "/observability")), refresh=True)
        except KeyboardInterrupt:
            pass


def render(view: dict[str, Any]) -> Group:
    """The tables for one `/observability` answer."""
    if view.get("updated") is None:
        return Group(Text("the controller has not sampled the fleet yet; try again in a few seconds"))
    role = "leader" if view["leader"] else f"standby (leader: {view.get('leader_id') or 'none'})"
    counters = view["counters"]
    header = Text(
        f"controller {view['controller']} — {role} · unassigned partitions {view['unassigned']} · "
        f"assignment changes {int(counters['assignment_changes'])} · healing moves {int(counters['healing_moves'])}"
    )
    parts = (_workers(view), _routes(view), _copy_modes(view), _topics(view))
    return Group(header, *[p for p in parts if p is not None], *_problems(view), *_balance(view))


def _workers(view: dict[str, Any]) -> Table:
    table = Table("worker", "state", "pool", "partitions", "bytes/s", "health", "watchdog", title="Workers")
    for w in view["workers"]:
        health = "[red]hung[/]" if w["hung"] else "[yellow]slow[/]" if w["slow"] else "ok" if w["live"] else "-"
        state = f"[red]{w['state']}[/]" if w["state"] == "dead" else w["state"]
        pool = w.get("pool", "default")
        acted = ", ".join(f"{what}: {n}" for what, n in (w.get("watchdog") or {}).items())
        watchdog = f"[yellow]{acted}[/]" if acted else "-"
        table.add_row(w["id"], state, pool, str(len(w["partitions"])), f"{w['bytes_per_s']:,.0f}", health, watchdog)
    return table


def _routes(view: dict[str, Any]) -> Table:
    table = Table("route", "pools", "topics", "bytes/s", "e2e p50 s", "e2e p99 s", title="Routes")
    for r in view["routes"]:
        latency = view["latency"].get(r["name"], {})
        p50, p99 = _num(latency.get("p50_s")), _num(latency.get("p99_s"))
        pools = ", ".join(r.get("pools") or []) or "any"
        if r.get("no_live_worker"):
            pools = f"[red]{pools}: no live worker, waiting[/]"
        table.add_row(r["name"], pools, str(r["topics"]), f"{r['bytes_per_s']:,.0f}", p50, p99)
    return table


def _copy_modes(view: dict[str, Any]) -> Table | None:
    """Partitions per route and copy mode, with why (routes that chose `copy: record` are left
    out: nothing fell back there)."""
    rows = view.get("copy_modes") or []
    # Batch is the default: a batch route's partitions run in batch mode while they lag and record
    # by record once caught up; an exactly-once or active-active route, or a partition whose
    # batches cannot pass unchanged, fell back to record mode. Each is listed with its reason.
    shown = {r["route"] for r in rows if not r["reason"].startswith("route option copy: record")}
    rows = [r for r in rows if r["route"] in shown]
    if not rows:
        return None
    table = Table("route", "mode", "partitions", "why", title="Copy modes")
    for r in rows:
        table.add_row(r["route"], r["mode"], str(r["partitions"]), r["reason"] or "-")
    return table


def _topics(view: dict[str, Any]) -> Table:
    table = Table("route/topic", "lag (records)", title="Lag per topic")
    for topic, lag in view["lag_by_topic"].items():
        table.add_row(topic, f"{lag:,}")
    return table


def _problems(view: dict[str, Any]) -> list[Table]:
    out = []
    if view["stuck"]:
        table = Table("partition", "worker", "lag", "stalled s", "moves", "status", title="Stuck partitions")
        for s in view["stuck"]:
            status = f"[red]needs a person: {s['flagged']}[/]" if s["flagged"] else "stuck" if s["stuck"] else "healed"
            row = (s["partition"], s["worker"] or "-", _num(s["lag"]), _num(s["stalled_s"]), str(s["moves"]), status)
            table.add_row(*row)
        out.append(table)
    if view["slow_workers"]:
        table = Table("worker", "bytes/s per partition", "peers' median", title="Slow workers")
        for s in view["slow_workers"]:
            table.add_row(s["worker"], _num(s["bytes_per_s_per_partition"]), _num(s["peers_median"]))
        out.append(table)
    return out


def _balance(view: dict[str, Any]) -> list[Table]:
    if not view.get("balance"):
        return []
    table = Table("cluster", "execution", "status", "moves", "progress", title="Balance execution")
    for cluster, b in sorted(view["balance"].items()):
        states = ", ".join(f"{n} {s}" for s, n in b["by_state"].items())
        table.add_row(cluster, b["execution"], b["status"], states, f"{b['progress']:.0%}")
    return [table]


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.4g}" if isinstance(value, float) else f"{value:,}"
