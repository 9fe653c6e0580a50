"""Destination topic naming per route: identity, a prefix or a template, validated at load."""

from __future__ import annotations

import re
from typing import Any

import pytest

from strait.config import ConfigError, RouteConfig, StraitConfig, parse_config
from strait.controller.discovery import copied_back, plan_topic_updates
from strait.controller.service import ControllerService, TopicRequest
from strait.coordination.model import TopicSpec


def _config(*routes: dict[str, Any], clusters: tuple[str, ...] = ("A", "B")) -> StraitConfig:
    return parse_config({"clusters": {c: {} for c in clusters}, "routes": list(routes)}, environ={})


def _route(**naming: str) -> RouteConfig:
    return _config({"name": "ab", "source": "A", "destination": "B", "naming": naming}).routes[0]


def test_identity_is_the_default() -> None:
    route = _config({"name": "ab", "source": "A", "destination": "B"}).routes[0]
    assert not route.naming.renames
    assert route.destination_topic("orders") == "orders"


def test_a_prefix_goes_before_the_name_and_is_undone() -> None:
    route = _route(prefix="A.")
    assert route.destination_topic("orders") == "A.orders"
    names = {"route": "ab", "source": "A", "destination": "B"}
    assert route.naming.source_topic("A.orders", **names) == "orders"
    assert route.naming.source_topic("orders", **names) is None
    assert route.naming.source_topic("A.", **names) is None  # an empty source name is no topic


def test_a_template_names_clusters_and_route() -> None:
    route = _route(template="{source_cluster}-to-{destination_cluster}.{route}.{topic}")
    assert route.destination_topic("orders") == "A-to-B.ab.orders"
    names = {"route": "ab", "source": "A", "destination": "B"}
    assert route.naming.source_topic("A-to-B.ab.orders", **names) == "orders"
    assert route.naming.source_topic("A-to-C.ab.orders", **names) is None
    # Regular-expression characters in the literal parts are literal.
    dotted = _route(template="{topic}.copy")
    assert dotted.naming.source_topic("orders.copy", **names) == "orders"
    assert dotted.naming.source_topic("ordersXcopy", **names) is None


def test_a_template_may_repeat_the_topic() -> None:
    route = _route(template="{topic}.{topic}")
    names = {"route": "ab", "source": "A", "destination": "B"}
    assert route.destination_topic("x") == "x.x"
    assert route.naming.source_topic("x.x", **names) == "x"
    assert route.naming.source_topic("x.y", **names) is None


@pytest.mark.parametrize(
    ("naming", "message"),
    [
        ({"prefix": "A/"}, "prefix 'A/'"),
        ({"prefix": ""}, "at least 1 character"),
        ({"template": "{source_cluster}"}, "must contain {topic}"),
        ({"template": "{topic}.{region}"}, "unknown field {region}"),
        ({"template": "{topic:>10}"}, "unknown field {topic}"),
        ({"template": "{topic!r}"}, "unknown field {topic}"),
        ({"template": "x y.{topic}"}, "characters a topic name cannot have"),
        ({"template": "{topic"}, "template '{topic'"),
        ({"prefix": "A.", "template": "{topic}"}, "either prefix or template"),
        ({"suffix": ".A"}, "suffix"),
    ],
)
def test_bad_naming_is_refused_at_load(naming: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match="naming") as caught:
        _config({"name": "ab", "source": "A", "destination": "B", "naming": naming})
    assert message in str(caught.value)


def test_a_cluster_name_a_topic_cannot_carry_is_refused_in_a_template() -> None:
    with pytest.raises(ConfigError, match=re.escape("naming: gives 'east:1.t'")):
        _config(
            {"name": "ab", "source": "east:1", "destination": "B", "naming": {"template": "{source_cluster}.{topic}"}},
            clusters=("east:1", "B"),
        )
    # Unused in the template, such a cluster name is fine.
    _config(
        {"name": "ab", "source": "east:1", "destination": "B", "naming": {"prefix": "e."}}, clusters=("east:1", "B")
    )


def test_discovery_names_new_topics_by_the_route_and_keeps_existing_names() -> None:
    config = _config({"name": "ab", "source": "A", "destination": "B", "include": [".*"], "naming": {"prefix": "A."}})
    route = config.routes[0]
    existing = {("ab", "old"): TopicSpec("ab", "old", "old", origin="pattern", partitions=1, initial_partitions=1)}
    updates = plan_topic_updates(route, {"new": 2, "old": 3}, existing, frozenset(), config.routes)
    by_topic = {u.topic: u for u in updates}
    assert by_topic["new"].destination_topic == "A.new"
    # A topic added before the naming changed keeps its destination (its checkpoints and map are there).
    assert by_topic["old"].destination_topic == "old" and by_topic["old"].partitions == 3


def test_discovery_does_not_copy_back_the_opposite_routes_renamed_copies() -> None:
    config = _config(
        {"name": "ab", "source": "A", "destination": "B", "include": [".*"], "naming": {"prefix": "A."}},
        {"name": "ba", "source": "B", "destination": "A", "include": [".*"], "naming": {"prefix": "B."}},
    )
    ab, ba = config.routes
    # On A: "orders" (A's own) and "B.orders" (ba's copy of B's orders).
    planned = plan_topic_updates(ab, {"orders": 1, "B.orders": 1}, {}, frozenset(), config.routes)
    assert [(u.topic, u.destination_topic) for u in planned] == [("orders", "A.orders")]
    planned = plan_topic_updates(ba, {"orders": 1, "A.orders": 1}, {}, frozenset(), config.routes)
    assert [(u.topic, u.destination_topic) for u in planned] == [("orders", "B.orders")]
    assert copied_back(ab, "B.orders", config.routes) is ba
    assert copied_back(ab, "orders", config.routes) is None


def test_a_chain_is_not_a_loop() -> None:
    # A->B renames to "A.t"; B->C copies it on as "B.A.t": B->C is not A->B's opposite.
    config = _config(
        {"name": "ab", "source": "A", "destination": "B", "include": [".*"], "naming": {"prefix": "A."}},
        {"name": "bc", "source": "B", "destination": "C", "include": [".*"], "naming": {"prefix": "B."}},
        clusters=("A", "B", "C"),
    )
    bc = config.routes[1]
    planned = plan_topic_updates(bc, {"A.t": 1}, {}, frozenset(), config.routes)
    assert [(u.topic, u.destination_topic) for u in planned] == [("A.t", "B.A.t")]


def test_same_name_routes_both_ways_are_left_to_the_origin_header() -> None:
    config = _config(
        {"name": "ab", "source": "A", "destination": "B", "include": [".*"], "active_active": True},
        {"name": "ba", "source": "B", "destination": "A", "include": [".*"], "active_active": True},
    )
    planned = plan_topic_updates(config.routes[0], {"t": 1}, {}, frozenset(), config.routes)
    assert [(u.topic, u.destination_topic) for u in planned] == [("t", "t")]


def test_a_destination_name_longer_than_kafka_allows_is_not_picked_up() -> None:
    config = _config({"name": "ab", "source": "A", "destination": "B", "include": [".*"], "naming": {"prefix": "A."}})
    long_name = "x" * 248
    assert (
        plan_topic_updates(config.routes[0], {long_name: 1, "ok": 1}, {}, frozenset(), config.routes)[0].topic == "ok"
    )


class _Store:
    def __init__(self) -> None:
        self.created: list[TopicSpec] = []

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        self.created.append(spec)
        return None


class _Metadata:
    def partition_count(self, cluster: str, topic: str) -> int | None:
        return 4


def test_adding_a_topic_through_the_api_uses_the_routes_naming_unless_told_otherwise() -> None:
    config = _config(
        {"name": "ab", "source": "A", "destination": "B", "naming": {"template": "{source_cluster}.{topic}"}}
    )
    store = _Store()
    service = ControllerService(config=config, store=store, metadata=_Metadata())  # type: ignore[arg-type]
    _, added = service.add_topic("orders", TopicRequest(route="ab"))
    assert added["destination_topic"] == "A.orders"
    _, added = service.add_topic("audit", TopicRequest(route="ab", destination_topic="audit-copy"))
    assert added["destination_topic"] == "audit-copy"
    assert [s.destination_topic for s in store.created] == ["A.orders", "audit-copy"]
