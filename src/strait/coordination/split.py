"""The assignment in ZooKeeper, split per worker (layout 2), and how it is read and written.

Layout under the store's root::

    assignment                      {"layout": 2, "partitions": n, "workers": n, "gen": g}: the
                                    manifest; its version is the compare-and-set version
    assignment/workers/<id>         {"gen": g, "more": k, "p": [[route, topic, "0-99,105"], ...]}
    assignment/workers/<id>/<i>     {"gen": g, "p": [...]} for i in 1..k, when one node would
                                    pass CHUNK_BYTES (a worker's read checks every gen matches)
    assignment/unowned              the same, for partitions waiting for their old owner

The previous layout (layout 1) kept ``{"route/topic/partition": worker | null}`` for every
partition in the single ``assignment`` node, which passed ZooKeeper's 1 MB node limit near 25k
partitions. Layout 1 is still read: a controller of this version publishes its first
assignment in layout 2 (creating the nodes, then replacing the old map by the manifest), and a
worker of this version reads its part from the old map while no node of its own exists.

Writes are fenced like before: every ZooKeeper transaction of a publish first checks the
leader epoch, so a deposed leader cannot write any of the nodes, and the first also checks the
manifest's version (compare-and-set), the last bumps it. A large publish takes several
transactions (ZooKeeper also limits one request to 1 MB): first every node that loses
partitions is written without them, then the nodes that gain, so a partition is never in two
workers' nodes at any moment, as in the single node. A worker node is written children first,
head last; the head's watch tells the worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from strait.coordination.model import (
    Assignment,
    PartitionKey,
    decode_keys,
    encode_keys,
    split_encoded,
)
from strait.coordination.store import StoreUnavailable

log = logging.getLogger(__name__)

LAYOUT = 2
UNOWNED = ""  # the name of the unowned node among the worker nodes in this module
# A node's payload above this is cut into child nodes; one transaction carries at most about
# TX_BYTES of payload (ZooKeeper refuses requests above jute.maxbuffer, 1 MB by default).
CHUNK_BYTES = 256 * 1024
TX_BYTES = 600 * 1024
TX_OPS = 1000
_TORN_READ_TRIES = 5


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        log.warning("ignoring a node that is not JSON: %r", data[:80])
        return {}


def is_split(manifest: Mapping[str, Any]) -> bool:
    return isinstance(manifest, Mapping) and manifest.get("layout") == LAYOUT


def parse_legacy(doc: Mapping[str, Any]) -> dict[PartitionKey, str | None]:
    """The layout-1 map (one node, every partition)."""
    owners: dict[PartitionKey, str | None] = {}
    for key, worker in doc.items():
        try:
            owners[PartitionKey.parse(key)] = worker
        except ValueError:
            log.warning("ignoring malformed assignment key %r", key)
    return owners


@dataclass
class _Node:
    keys: frozenset[PartitionKey]
    version: int | None  # the head node's version; None: it does not exist
    more: int = 0


class Torn(Exception):
    """A node was read while it was being rewritten (its pieces have different generations)."""


@dataclass(frozen=True)
class PublishFigures:
    """What the last successful publish wrote (for logs and benchmarks)."""

    nodes: int
    transactions: int
    bytes: int


class SplitAssignment:
    """Reads and writes the split assignment for a `ZooKeeperStore` (same client and session)."""

    def __init__(self, client: KazooClient, root: str, call: Callable[..., Any]) -> None:
        self._client = client
        self._root = root
        self._call = call
        self._cache: tuple[int, dict[str, _Node], bool] | None = None  # (version, nodes, legacy)
        self.legacy = True  # the cluster was last seen in layout 1 (until a read says otherwise)
        self.last_publish: PublishFigures | None = None

    # --- paths ---------------------------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        return f"{self._root}/assignment"

    def head_path(self, name: str) -> str:
        if name == UNOWNED:
            return f"{self._root}/assignment/unowned"
        return f"{self._root}/assignment/workers/{name}"

    def ensure(self) -> None:
        """Create the manifest (layout 2, empty) on a new cluster; an old one is left as it is."""
        with contextlib.suppress(NodeExistsError):
            self._call(self._client.create, self.manifest_path, _dump({"layout": LAYOUT, "gen": 0}), makepath=True)
        self._call(self._client.ensure_path, f"{self._root}/assignment/workers")

    # --- reading -------------------------------------------------------------------------
    def _get(self, path: str) -> tuple[Any, ZnodeStat] | None:
        try:
            data, stat = self._call(self._client.get, path)
        except NoNodeError:
            return None
        return _load(data), stat

    def _get_many(self, paths: list[str]) -> dict[str, tuple[Any, ZnodeStat]]:
        from kazoo.handlers.threading import KazooTimeoutError

        pending = [(p, self._client.get_async(p)) for p in paths]
        found: dict[str, tuple[Any, ZnodeStat]] = {}
        for path, result in pending:
            try:
                data, stat = result.get(timeout=10)
            except NoNodeError:
                continue
            except KazooTimeoutError as exc:
                raise StoreUnavailable(f"ZooKeeper unavailable: {exc!r}") from exc
            except Exception as exc:
                if type(exc).__module__.startswith("kazoo"):
                    raise StoreUnavailable(f"ZooKeeper unavailable: {exc!r}") from exc
                raise
            found[path] = (_load(data), stat)
        return found

    def _pieces(self, heads: Mapping[str, tuple[Any, ZnodeStat]]) -> dict[str, frozenset[PartitionKey]]:
        """Each head's partitions, with its child pieces read; raises `Torn` on mixed gens."""
        child_paths = [f"{path}/{i}" for path, (doc, _) in heads.items() for i in range(1, int(doc.get("more", 0)) + 1)]
        children = self._get_many(child_paths) if child_paths else {}
        out: dict[str, frozenset[PartitionKey]] = {}
        for path, (doc, _) in heads.items():
            entries = list(doc.get("p", []))
            for i in range(1, int(doc.get("more", 0)) + 1):
                child = children.get(f"{path}/{i}")
                if child is None or child[0].get("gen") != doc.get("gen"):
                    raise Torn(path)
                entries.extend(child[0].get("p", []))
            out[path] = decode_keys(entries)
        return out

    def read(self) -> Assignment:
        """The whole assignment (controller, REST): every node, or the layout-1 map."""
        for _ in range(_TORN_READ_TRIES):
            root = self._get(self.manifest_path)
            if root is None:
                return Assignment()
            manifest, stat = root
            if not is_split(manifest):
                self.legacy = True
                self._cache = (stat.version, {}, True)
                return Assignment(owners=parse_legacy(manifest), version=stat.version)
            self.legacy = False
            try:
                names = sorted(self._call(self._client.get_children, f"{self._root}/assignment/workers"))
            except NoNodeError:
                names = []
            paths = {self.head_path(n): n for n in [*names, UNOWNED]}
            heads = self._get_many(list(paths))
            try:
                keys = self._pieces(heads)
            except Torn:
                continue
            again = self._get(self.manifest_path)
            if again is None or again[1].version != stat.version:
                continue  # a publish finished meanwhile: read the new one whole
            owners: dict[PartitionKey, str | None] = {}
            nodes: dict[str, _Node] = {}
            for path, name in paths.items():
                if path not in heads:
                    continue
                doc, head_stat = heads[path]
                nodes[name] = _Node(keys[path], head_stat.version, int(doc.get("more", 0)))
                for key in keys[path]:
                    owners[key] = name if name != UNOWNED else None
            self._cache = (stat.version, nodes, False)
            return Assignment(owners=owners, version=stat.version)
        raise StoreUnavailable("the assignment kept changing while it was read")

    def read_worker(self, worker_id: str) -> Assignment:
        """Only `worker_id`'s part. `version` is the node's last-modified zxid (unique across
        publishes), so two reads compare equal only if nothing was written in between."""
        path = self.head_path(worker_id)
        for _ in range(_TORN_READ_TRIES):
            head = self._get(path)
            if head is None:
                root = self._get(self.manifest_path)
                if root is None:
                    return Assignment()
                if is_split(root[0]):
                    self.legacy = False
                    return Assignment(owners={}, version=-1)
                self.legacy = True
                owners = {k: w for k, w in parse_legacy(root[0]).items() if w == worker_id}
                return Assignment(owners=owners, version=root[1].mzxid)
            self.legacy = False
            try:
                keys = self._pieces({path: head})[path]
            except Torn:
                continue
            return Assignment(owners=dict.fromkeys(keys, worker_id), version=head[1].mzxid)
        raise StoreUnavailable(f"worker {worker_id}'s assignment kept changing while it was read")

    def watch_worker(self, worker_id: str, on_change: Callable[[Assignment], None]) -> None:
        """Call `on_change` when `worker_id`'s node changes (and, while the cluster is still in
        layout 1, when the old map does). The assignment passed is a hint (the head only):
        read `read_worker` for the whole."""

        def head_changed(data: bytes | None, stat: ZnodeStat | None) -> bool:
            keys = decode_keys(_load(data).get("p", [])) if stat is not None else frozenset()
            on_change(Assignment(owners=dict.fromkeys(keys, worker_id), version=stat.mzxid if stat else -1))
            return True

        def manifest_changed(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if stat is not None and is_split(_load(data)):
                on_change(Assignment())
                return False  # the split layout is in place: the worker's own node says the rest
            on_change(Assignment())
            return True

        DataWatch(self._client, self.head_path(worker_id), head_changed)
        DataWatch(self._client, self.manifest_path, manifest_changed)

    # --- writing -------------------------------------------------------------------------
    def write(self, owners: Mapping[PartitionKey, str | None], version: int, epoch: tuple[str, int]) -> bool:
        """Publish `owners` if the manifest is still at `version`, fenced by `epoch` (path, version)."""
        if self._cache is None or self._cache[0] != version:
            self.read()
        if self._cache is None or self._cache[0] != version:
            return False
        _, cached, legacy = self._cache
        nodes = {name: _Node(n.keys, n.version, n.more) for name, n in cached.items()}
        desired: dict[str, set[PartitionKey]] = {}
        for key, worker in owners.items():
            desired.setdefault(UNOWNED if worker is None else worker, set()).add(key)
        if legacy:
            # Layout 1: no node exists yet; what each worker has is in the old map.
            current: dict[str, frozenset[PartitionKey]] = {}
            for key, worker in parse_legacy(self._legacy_doc()).items():
                name = UNOWNED if worker is None else worker
                current[name] = current.get(name, frozenset()) | {key}
        else:
            current = {name: node.keys for name, node in nodes.items()}
        gen = version + 1
        groups: list[list[tuple[str, str, bytes | None, int]]] = []
        # Phase 1: every node that loses partitions, without them; phase 2: every node that
        # gains (or does not exist yet), with its whole new set.
        stage: dict[str, frozenset[PartitionKey]] = {}
        for name in sorted(set(desired) | set(current)):
            have, want = current.get(name, frozenset()), frozenset(desired.get(name, ()))
            stage[name] = have
            if have - want:
                stage[name] = have & want
                groups.append(self._node_ops(name, stage[name], gen, nodes))
        for name in sorted(set(desired) | set(current)):
            want = frozenset(desired.get(name, ()))
            if want != stage[name] or (want and name not in nodes):
                groups.append(self._node_ops(name, want, gen, nodes))
        manifest = {
            "layout": LAYOUT,
            "gen": gen,
            "partitions": len(owners),
            "workers": sum(1 for name in desired if name != UNOWNED),
        }
        ok, figures = self._commit(groups, version, _dump(manifest), epoch)
        if not ok:
            self._cache = None
            return False
        for name in set(desired) | set(current):
            if name in nodes:
                nodes[name].keys = frozenset(desired.get(name, ()))
        self._cache = (version + 1, nodes, False)
        self.legacy = False
        self.last_publish = figures
        return True

    def _legacy_doc(self) -> Mapping[str, Any]:
        root = self._get(self.manifest_path)
        return {} if root is None or is_split(root[0]) else root[0]

    def _node_ops(
        self, name: str, keys: frozenset[PartitionKey], gen: int, nodes: dict[str, _Node]
    ) -> list[tuple[str, str, bytes | None, int]]:
        """Operations (kind, path, data, version) writing one node: children, then the head."""
        path = self.head_path(name)
        node = nodes.get(name)
        pieces = split_encoded(encode_keys(keys), CHUNK_BYTES)
        more = len(pieces) - 1
        existing: set[int] = set()
        if node is not None and node.version is not None and (more > 0 or node.more > 0):
            try:
                existing = {int(c) for c in self._call(self._client.get_children, path) if c.isdigit()}
            except NoNodeError:
                existing = set()
        children: list[tuple[str, str, bytes | None, int]] = []
        for i, piece in enumerate(pieces[1:], 1):
            data = _dump({"gen": gen, "p": piece})
            children.append(("set" if i in existing else "create", f"{path}/{i}", data, -1))
        head = _dump({"gen": gen, "more": more, "p": pieces[0]})
        ops: list[tuple[str, str, bytes | None, int]]
        if node is None or node.version is None:
            # A new node's children need their parent: head first (a reader that finds a piece
            # missing reads again, as for any torn read).
            ops = [("create", path, head, -1), *children]
            nodes[name] = _Node(keys, 0, more)
        else:
            ops = [*children, ("set", path, head, node.version)]
            nodes[name] = _Node(keys, node.version + 1, more)
        for i in sorted(existing):
            if i > more:
                ops.append(("delete", f"{path}/{i}", None, -1))
        return ops

    def _commit(
        self,
        groups: list[list[tuple[str, str, bytes | None, int]]],
        version: int,
        manifest: bytes,
        epoch: tuple[str, int],
    ) -> tuple[bool, PublishFigures]:
        ops = [op for group in groups for op in group]
        batches: list[list[tuple[str, str, bytes | None, int]]] = [[]]
        size = 0
        for op in ops:
            length = len(op[2] or b"") + len(op[1])
            if batches[-1] and (size + length > TX_BYTES or len(batches[-1]) >= TX_OPS):
                batches.append([])
                size = 0
            batches[-1].append(op)
            size += length
        if size + len(manifest) > TX_BYTES and batches[-1]:
            batches.append([])
        epoch_path, epoch_version = epoch
        written = 0
        for n, batch in enumerate(batches):
            transaction = self._client.transaction()
            transaction.check(epoch_path, epoch_version)
            if n == 0:
                transaction.check(self.manifest_path, version)
            for kind, path, data, node_version in batch:
                if kind == "create":
                    transaction.create(path, data or b"")
                elif kind == "set":
                    transaction.set_data(path, data or b"", version=node_version)
                else:
                    transaction.delete(path, version=node_version)
                written += len(data or b"")
            if n == len(batches) - 1:
                transaction.set_data(self.manifest_path, manifest, version=version)
            results = self._call(transaction.commit)
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                log.info(
                    "assignment write lost a race in transaction %d of %d (%s)",
                    n + 1,
                    len(batches),
                    ", ".join(sorted({type(r).__name__ for r in failed})),
                )
                return False, PublishFigures(0, 0, 0)
        return True, PublishFigures(sum(1 for op in ops if op[0] != "delete"), len(batches), written + len(manifest))

    def forget(self, worker_id: str, epoch: tuple[str, int]) -> None:
        """Delete a forgotten worker's node if it is empty (fenced: only the leader may)."""
        path = self.head_path(worker_id)
        head = self._get(path)
        if head is None or head[0].get("p") or head[0].get("more"):
            return
        try:
            children = self._call(self._client.get_children, path)
        except NoNodeError:
            return
        transaction = self._client.transaction()
        transaction.check(epoch[0], epoch[1])
        for child in children:
            transaction.delete(f"{path}/{child}")
        transaction.delete(path, version=head[1].version)
        results = self._call(transaction.commit)
        if any(isinstance(r, Exception) for r in results):
            log.info("worker %s's empty assignment node not deleted (lost a race)", worker_id)
        self._cache = None
