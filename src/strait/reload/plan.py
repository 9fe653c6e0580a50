"""What a reload changes in a running process: a pure decision from the running configuration
and the newly read one.

A worker applies, while it runs:

- new SASL credentials of a cluster (``sasl.username``, ``sasl.password``; the keys set before
  and after): live clients take them for their next connections, new clients are made with them;
- routes added (a copier starts), removed (its copier revokes every partition with a final
  checkpoint and stops) and changed (both, in that order; the partitions still assigned here
  resume from their checkpoints). A change of only ``include``, ``exclude``, ``pools`` or
  ``groups``, which controllers alone read, is taken without touching the copier.

A controller applies new credentials, routes added and removed, and new ``include``/``exclude``
patterns (topic discovery reads them at its next cycle). A route added with ``pools`` or
``delivery: exactly-once`` is not added (its pools and its fencing are set up when the controller
starts); any other route change waits for a restart there too.

Everything else (the coordination store, ``controller``, ``worker``, ``observability``,
``balance``, clusters added or removed, any cluster property but the credentials, a route's
``source`` or ``destination``) keeps its running value and is named as needing a restart. The
decision never quotes a value, only keys, so a secret cannot reach a log line through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from strait.config import RouteConfig, StraitConfig

Role = Literal["worker", "controller"]

# Cluster properties a reload hands to live librdkafka clients (set_sasl_credentials).
CREDENTIAL_KEYS = ("sasl.username", "sasl.password")
# Sections read when a process starts, and nowhere again.
RESTART_SECTIONS = ("coordination", "controller", "worker", "observability", "balance")
# Route fields whose change means other checkpoints (another cluster's group): as a restart does.
_ROUTE_ENDPOINTS = ("source", "destination")
# Route fields a controller reads at each cycle.
_CONTROLLER_LIVE_ROUTE_FIELDS = frozenset({"include", "exclude"})
# Route fields only controllers read (which topics, which workers, which groups): a worker takes
# them without touching the route's copier.
_CONTROLLER_ONLY_ROUTE_FIELDS = frozenset({"include", "exclude", "pools", "groups"})


@dataclass(frozen=True)
class ReloadPlan:
    """The outcome of comparing the running configuration with a newly read one.

    ``config`` is what runs after the reload: the new file's values where they apply live, the
    running ones where they need a restart (listed in ``restart`` by key).
    """

    config: StraitConfig
    credentials: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()

    @property
    def applies(self) -> bool:
        """Whether anything changes in the running process."""
        return bool(self.credentials or self.added or self.removed or self.changed)

    def describe(self) -> list[str]:
        """What applies, one phrase each (keys only, never values)."""
        said = [
            f"new credentials for cluster {name} ({', '.join(sorted(keys))})" for name, keys in self.credentials.items()
        ]
        said += [f"route {name} added" for name in self.added]
        said += [f"route {name} removed" for name in self.removed]
        said += [f"route {name} changed" for name in self.changed]
        return said


def plan(old: StraitConfig, new: StraitConfig, role: Role) -> ReloadPlan:
    """Decide what of ``new`` a ``role`` process running ``old`` applies, and what needs a restart."""
    restart: list[str] = []
    for section in RESTART_SECTIONS:
        restart += _differences(section, getattr(old, section).model_dump(), getattr(new, section).model_dump())
    credentials, cluster_restart = _clusters(old.clusters, new.clusters)
    restart += cluster_restart
    routes, added, removed, changed, route_restart = _routes(old.routes, new.routes, role)
    restart += route_restart
    clusters = {name: {**props, **credentials.get(name, {})} for name, props in old.clusters.items()}
    config = old.model_copy(update={"routes": routes, "clusters": clusters})
    return ReloadPlan(
        config=config,
        credentials=credentials,
        added=tuple(added),
        removed=tuple(removed),
        changed=tuple(changed),
        restart=tuple(restart),
    )


def _differences(path: str, old: Any, new: Any) -> list[str]:
    """The keys (dotted, as in the file) where ``old`` and ``new`` differ, deepest first named."""
    if old == new:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new), key=str)
        return [key for name in keys for key in _differences(f"{path}.{name}", old.get(name), new.get(name))]
    return [path]


def _clusters(
    old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, dict[str, str]], list[str]]:
    credentials: dict[str, dict[str, str]] = {}
    restart: list[str] = []
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            restart.append(f"clusters.{name}")
            continue
        before, after = old[name], new[name]
        for key in sorted(set(before) | set(after)):
            if before.get(key) == after.get(key):
                continue
            if key in CREDENTIAL_KEYS and key in before and key in after:
                credentials.setdefault(name, {})[key] = str(after[key])
            else:
                restart.append(f"clusters.{name}.{key}")
    return credentials, restart


def _routes(
    old: list[RouteConfig], new: list[RouteConfig], role: Role
) -> tuple[list[RouteConfig], list[str], list[str], list[str], list[str]]:
    before = {route.name: route for route in old}
    after = {route.name: route for route in new}
    routes: list[RouteConfig] = []
    added: list[str] = []
    changed: list[str] = []
    restart: list[str] = []
    for route in new:
        previous = before.get(route.name)
        if previous is None:
            blocked = _controller_cannot_add(route) if role == "controller" else []
            if blocked:
                restart += blocked
            else:
                added.append(route.name)
                routes.append(route)
            continue
        # By field name (copy_mode), not by the file's alias (copy): keys name what the code reads.
        was, now = previous.model_dump(), route.model_dump()
        names = {name for name in now if was[name] != now[name]}
        blocked_names = names & set(_ROUTE_ENDPOINTS)
        if role == "controller":
            blocked_names |= names - _CONTROLLER_LIVE_ROUTE_FIELDS
        if blocked_names:
            restart += [f"routes.{route.name}.{name}" for name in sorted(blocked_names)]
            routes.append(previous)
        elif names and (role == "controller" or names - _CONTROLLER_ONLY_ROUTE_FIELDS):
            changed.append(route.name)
            routes.append(route)
        else:
            routes.append(route)
    removed = [name for name in before if name not in after]
    return routes, added, removed, changed, restart


def _controller_cannot_add(route: RouteConfig) -> list[str]:
    blocked = []
    if route.pools:
        blocked.append(f"routes.{route.name}.pools")
    if route.delivery == "exactly-once":
        blocked.append(f"routes.{route.name}.delivery")
    return blocked
