"""The Kafka store's pure parts: folding records into views, liveness by the reader's clock,
the session judged from round trips, the order of an assignment publish, and its config."""

from __future__ import annotations

import random
from typing import Any

import pytest

from strait import config as config_module
from strait.config import ConfigError, parse_config
from strait.coordination.kafka import CHUNK_BYTES, assignment_key, assignment_records
from strait.coordination.model import PartitionKey, SessionState, decode_keys
from strait.coordination.views import Entry, SessionClock, View, arrival, encode, fresh


def test_a_view_keeps_the_latest_value_and_a_tombstone_removes_the_key() -> None:
    view = View()
    assert view.apply("topic/r/a", encode({"x": 1}), 1.0)
    assert not view.apply("topic/r/a", encode({"x": 1}), 2.0), "a rewrite of the same value is no change"
    assert view.entry("topic/r/a") == Entry({"x": 1}, 2.0), "but it refreshes the arrival (a heartbeat)"
    assert view.apply("topic/r/a", encode({"x": 2}), 3.0)
    assert view.apply("topic/r/b", encode({}), 3.0)
    assert not view.apply("nothing", None, 3.0)
    assert view.apply("topic/r/a", None, 4.0)
    assert [(rest, e.value) for rest, e in view.under("topic/")] == [("r/b", {})]
    assert not view.apply("junk", b"not json", 5.0) and view.get("junk") is None


def test_liveness_is_judged_by_the_readers_clock_once_caught_up() -> None:
    # A writer's clock an hour off does not matter once the reader reads as records come.
    arrived = arrival(now_mono=100.0, now_wall=5000.0, record_ts_s=5000.0 - 3600, caught_up=True)
    assert arrived == 100.0
    assert fresh(Entry({}, arrived), 103.9, 4.0)
    assert not fresh(Entry({}, arrived), 104.0, 4.0)
    assert not fresh(None, 100.0, 4.0)


def test_a_replayed_heartbeat_is_dated_by_its_timestamp() -> None:
    # Read while catching up: an old heartbeat must not make a long-dead worker look live.
    old = arrival(now_mono=100.0, now_wall=5000.0, record_ts_s=4990.0, caught_up=False)
    assert old == 90.0 and not fresh(Entry({}, old), 100.0, 4.0)
    recent = arrival(now_mono=100.0, now_wall=5000.0, record_ts_s=4999.0, caught_up=False)
    assert fresh(Entry({}, recent), 100.0, 4.0)
    # A writer's clock ahead of the reader's never dates a record in the future.
    assert arrival(now_mono=100.0, now_wall=5000.0, record_ts_s=5010.0, caught_up=False) == 100.0


@pytest.mark.parametrize(
    ("silent_s", "state"),
    [(0.0, SessionState.CONNECTED), (1.9, SessionState.CONNECTED), (2.0, SessionState.SUSPENDED),
     (3.9, SessionState.SUSPENDED), (4.0, SessionState.LOST), (60.0, SessionState.LOST)],
)  # fmt: skip
def test_the_session_is_in_doubt_after_half_the_timeout_and_lost_after_all_of_it(
    silent_s: float, state: SessionState
) -> None:
    assert SessionClock(4.0).state(last_ok=10.0, now=10.0 + silent_s) is state


def _fold(records: list[tuple[str, dict[str, object] | None]], view: View) -> None:
    for key, value in records:
        view.apply(key, None if value is None else encode(dict(value)), 0.0)


def _heads(view: View) -> dict[str | None, tuple[frozenset[PartitionKey], int]]:
    """Each name's partitions in the view, as the store reads them (all pieces of one gen)."""
    heads: dict[str | None, tuple[frozenset[PartitionKey], int]] = {}
    names: list[str | None] = [None, *(rest for rest, _ in view.under("assignment/worker/") if "/" not in rest)]
    for name in names:
        head = view.get(assignment_key(name))
        if head is None:
            continue
        pieces = [head] + [view.get(assignment_key(name, i)) or {} for i in range(1, int(head["more"]) + 1)]
        assert {p.get("gen") for p in pieces} == {head["gen"]}, f"torn pieces of {name}"
        heads[name] = (decode_keys(e for p in pieces for e in p["p"]), int(head["more"]))
    return heads


def _owners_seen(view: View) -> dict[PartitionKey, list[str | None]]:
    seen: dict[PartitionKey, list[str | None]] = {}
    for name, (keys, _) in _heads(view).items():
        for key in keys:
            seen.setdefault(key, []).append(name)
    return seen


@pytest.mark.parametrize("seed", range(30))
def test_a_publish_never_shows_a_partition_under_two_workers_and_ends_as_asked(seed: int) -> None:
    rng = random.Random(seed)
    keys = [PartitionKey("r", f"t{n % 7}", n) for n in range(rng.randint(1, 400))]
    workers: list[str | None] = [None, "w1", "w2", "w3", "w4"]
    view = View()
    current: dict[str | None, tuple[frozenset[PartitionKey], int]] = {}
    for gen in range(1, 5):
        owners = {k: rng.choice(workers) for k in keys if rng.random() < 0.9}
        records = assignment_records(current, owners, gen)
        for key, value in records:
            _fold([(key, value)], view)
            if key.count("/") <= 2:  # a head: a reader may look now
                assert all(len(names) == 1 for names in _owners_seen(view).values())
        current = _heads(view)
        assert {k: names[0] for k, names in _owners_seen(view).items()} == owners


def test_a_large_assignment_is_cut_into_pieces_under_the_message_limit_and_shrinks_back() -> None:
    keys = [PartitionKey("eu-west-dr", f"payments.events-{n % 25:02d}", n) for n in range(100_000)]
    owners: dict[PartitionKey, str | None] = {k: f"w{n % 2}" for n, k in enumerate(keys)}
    records = assignment_records({}, owners, 1)
    assert max(len(encode(dict(v))) for _, v in records if v is not None) < CHUNK_BYTES + 4096 < 1_000_000
    view = View()
    _fold(records, view)
    heads = _heads(view)
    assert heads["w0"][1] > 0, "a fragmented worker's part takes several pieces"
    shrunk = assignment_records(heads, dict.fromkeys(keys[:10], "w0"), 2)
    _fold(shrunk, view)
    assert {k: names[0] for k, names in _owners_seen(view).items()} == dict.fromkeys(keys[:10], "w0")
    assert view.get(assignment_key("w0", 1)) is None, "pieces no longer needed are deleted"


ROUTE = {"clusters": {"src": {}, "dst": {}}, "routes": [{"name": "r", "source": "src", "destination": "dst"}]}


def test_the_coordination_section_names_one_store() -> None:
    kafka = parse_config({**ROUTE, "coordination": {"kafka": {"cluster": "dst", "session_timeout_s": 6}}}, {})
    assert kafka.coordination.kafka is not None and kafka.coordination.kafka.prefix == "__strait"
    assert kafka.coordination.zookeeper is None and kafka.coordination.session_timeout_s == 6
    zk = parse_config({**ROUTE, "coordination": {"zookeeper": {"connect": "zk:2181"}}}, {})
    assert zk.zookeeper.connect == "zk:2181" and zk.coordination.session_timeout_s == 4
    default = parse_config(ROUTE, {"STRAIT_COORDINATION__KAFKA__CLUSTER": "src"})
    assert default.coordination.kafka is not None and default.coordination.kafka.cluster == "src"


def test_the_old_top_level_zookeeper_section_still_reads_with_one_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_module, "_legacy_zookeeper_warned", False)
    for _ in range(2):
        config = parse_config({**ROUTE, "zookeeper": {"connect": "zk:2181", "root": "/x"}}, {})
    assert config.coordination.zookeeper is not None and config.coordination.zookeeper.root == "/x"
    assert config.zookeeper.connect == "zk:2181"
    warnings = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert warnings == ["the top-level zookeeper section is deprecated: write it as coordination: {zookeeper: {...}}"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"coordination": {"kafka": {"cluster": "nope"}}}, "coordination.kafka.cluster: unknown cluster 'nope'"),
        ({"coordination": {}}, "coordination: give exactly one of kafka and zookeeper"),
        (
            {"coordination": {"kafka": {"cluster": "dst"}, "zookeeper": {}}},
            "coordination: give exactly one of kafka and zookeeper",
        ),
        ({"coordination": {"kafka": {"cluster": "dst"}}, "zookeeper": {}}, "zookeeper: the top-level zookeeper"),
        ({"coordination": {"kafka": {"cluster": "dst", "prefix": "a b"}}}, "coordination.kafka.prefix"),
        ({"coordination": {"kafka": {}}}, "coordination.kafka.cluster: Field required"),
    ],
)
def test_a_bad_coordination_section_is_refused_by_name(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config({**ROUTE, **section}, {})


def test_the_acls_cover_the_names_the_kafka_store_gives_its_resources() -> None:
    from strait.coordination.kafka import leader_transactional_id, reader_group
    from strait.security import acls

    def granted(resource: object, name: str) -> set[object]:
        return {
            p.operation
            for p in acls.COORDINATOR.permissions
            if p.resource == resource and (name == p.name if p.pattern is acls.LITERAL else name.startswith(p.name))
        }

    for prefix in ("__strait", "__strait-eu.dr"):
        assert acls.Op.WRITE in granted(acls.TRANSACTIONAL_ID, leader_transactional_id(prefix))
        assert acls.Op.DESCRIBE in granted(acls.GROUP, reader_group(prefix))
        for topic in (f"{prefix}.state", f"{prefix}.live"):
            assert {acls.Op.CREATE, acls.Op.WRITE, acls.Op.READ} <= granted(acls.TOPIC, topic)


class _Future:
    def __init__(self, error: int | None) -> None:
        self.error = error

    def result(self) -> None:
        if self.error is not None:
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(self.error))


class _Admin:
    """CreateTopics answering each topic with the next of ``errors`` (None: created)."""

    def __init__(self, errors: list[int | None]) -> None:
        self.errors = errors
        self.calls = 0

    def create_topics(self, topics: list[object], **_: object) -> dict[str, _Future]:
        self.calls += 1
        error = self.errors.pop(0)
        return {getattr(t, "topic", str(i)): _Future(error) for i, t in enumerate(topics)}


def _store_with(admin: _Admin) -> object:
    from strait.coordination.kafka import KafkaStore

    store = object.__new__(KafkaStore)
    store._admin = admin  # type: ignore[attr-defined]
    store._state_topic, store._live_topic, store._timeout_s = "s", "l", 6.0  # type: ignore[attr-defined]
    return store


def test_a_cluster_too_slow_to_create_the_topics_is_asked_again_until_the_last_try() -> None:
    from confluent_kafka import KafkaError

    from strait.coordination.store import StoreUnavailable

    store = _store_with(_Admin([KafkaError._TIMED_OUT, KafkaError.TOPIC_ALREADY_EXISTS]))
    assert store._ensure_topics(last=False) is False  # type: ignore[attr-defined]
    assert store._ensure_topics(last=False) is True  # type: ignore[attr-defined]
    late = _store_with(_Admin([KafkaError._TIMED_OUT]))
    with pytest.raises(StoreUnavailable, match="Timed out"):
        late._ensure_topics(last=True)  # type: ignore[attr-defined]
    # What no retry mends is said at once.
    refused = _store_with(_Admin([KafkaError.TOPIC_AUTHORIZATION_FAILED]))
    with pytest.raises(StoreUnavailable, match="cannot create the coordination topic"):
        refused._ensure_topics(last=False)  # type: ignore[attr-defined]


def test_a_store_frozen_past_its_session_timeout_ends_its_session_on_waking() -> None:
    import time as time_module

    store = _bare_store(6.0)
    heard: list[SessionState] = []
    store.on_session_change(heard.append)
    now = time_module.monotonic()
    store._last_ok = now - 5.0
    assert store.session_state() is SessionState.CONNECTED
    store._end_a_silent_session(now)
    assert heard == []
    # Frozen for 7 s: readers judged the heartbeats stale; the session is over, even before
    # the beat loop runs, and the loop says so before its next heartbeat could go through.
    store._last_ok = now - 7.0
    assert store.session_state() is SessionState.LOST
    store._end_a_silent_session(now)
    assert heard == [SessionState.LOST]
    assert store._owned == {} and store._session != "old"


class _Script:
    """A beat loop's clock and stop event: each wait and each round trip advance the clock; the
    loop stops once the scripted round trips are done. A reader asks the session's state at
    the end of each round trip, before the loop sees its answer."""

    def __init__(self, trips: list[float]) -> None:
        self.now = 1000.0
        self.trips = trips
        self.store: Any = None
        self.seen: list[SessionState] = []

    def monotonic(self) -> float:
        return self.now

    def wait(self, interval: float) -> bool:
        self.now += interval
        return not self.trips and bool(self.seen)

    def beat(self) -> None:
        self.now += self.trips.pop(0)
        self.seen.append(self.store.session_state())


def _bare_store(timeout_s: float) -> Any:
    import threading

    from strait.coordination.kafka import KafkaStore

    store: Any = object.__new__(KafkaStore)
    store._timeout_s, store._clock, store._ok_lock = timeout_s, SessionClock(timeout_s), threading.Lock()
    store._state, store._listeners, store._owned = SessionState.CONNECTED, [], {"w1": object()}
    store._session, store._leading = "old", None
    return store


@pytest.mark.parametrize(("trip_s", "after"), [(4.0, SessionState.CONNECTED), (5.0, SessionState.LOST)])
def test_a_heartbeat_that_lands_after_the_session_timeout_ends_the_session(
    monkeypatch: pytest.MonkeyPatch, trip_s: float, after: SessionState
) -> None:
    from strait.coordination import kafka as kafka_module

    script = _Script([trip_s])
    monkeypatch.setattr(kafka_module.time, "monotonic", script.monotonic)  # type: ignore[attr-defined]
    store = _bare_store(6.0)
    script.store, store._stop, store._beat, store._sync = store, script, script.beat, lambda _t: None
    store._last_ok, store._state = script.now, SessionState.SUSPENDED
    heard: list[SessionState] = []
    store.on_session_change(heard.append)
    # The loop waits 1.5 s (a quarter of the timeout), then the round trip: 5.5 s or 6.5 s of
    # silence when it lands. A reader told LOST meanwhile is not contradicted by its landing.
    store._beat_loop()
    assert heard == [after] and store.session_state() is after
    assert script.seen == [SessionState.SUSPENDED if after is SessionState.CONNECTED else SessionState.LOST]
    assert (store._session == "old") is (after is SessionState.CONNECTED)
