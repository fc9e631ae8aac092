"""The local backend's etcd: objects in SQLite, with one global, monotonically
increasing ``resourceVersion`` and a change log that watches read from.

Several processes share a state directory — a client submitting, a supervisor running
the job, a triggerer watching — so every write is one ``BEGIN IMMEDIATE`` transaction
(SQLite serialises writers; ``busy_timeout`` makes the others wait instead of failing)
and the database runs in WAL mode, where readers never wait for writers. Because the
version counter is bumped inside the writer's transaction, transactions commit in
version order: a reader that has seen version N has seen everything up to N, which is
what makes "watch from the listed version" exact.

The change log is pruned (oldest first); a watch from a pruned version gets
``410 Expired``, and the informer re-lists, as it does against a real apiserver.

Standard library only: the supervisor imports this module on every job start.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kf_trainer_core.emulation.selection import Selector
from kf_trainer_core.emulation.strategy import prepare_create
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    PODS,
    SECRETS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Resource,
)
from kf_trainer_core.k8s.selectors import FieldSelector, LabelSelector, field_value
from kf_trainer_core.k8s.status import StatusError

__all__ = [
    "CLUSTER_TRAINING_RUNTIMES",
    "EVENTS",
    "KINDS",
    "PODS",
    "SECRETS",
    "TRAINING_RUNTIMES",
    "TRAINJOBS",
    "Change",
    "FieldSelector",
    "Kind",
    "LabelSelector",
    "Selector",
    "StatusError",
    "Store",
    "Tx",
    "field_value",
]

JSON = dict[str, Any]

#: Changes kept for watches (a few hundred jobs' worth); older versions answer
#: 410 Expired and the informer re-lists, which is cheap here.
KEEP_CHANGES = 5_000
#: Prune the change log every this many writes (cheap, but not free).
PRUNE_EVERY = 200
#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS objects ("
    " resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,"
    " rv INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (resource, namespace, name))",
    "CREATE TABLE IF NOT EXISTS changes ("
    " rv INTEGER PRIMARY KEY, resource TEXT NOT NULL, namespace TEXT NOT NULL,"
    " type TEXT NOT NULL, data TEXT NOT NULL, prev TEXT)",
    "CREATE INDEX IF NOT EXISTS changes_by_resource ON changes (resource, rv)",
    # What the submitter decided for a job (interpreter, runtime facts, warnings), read
    # by the supervisor, which must not import the suite's pydantic models.
    "CREATE TABLE IF NOT EXISTS runs ("
    " uid TEXT PRIMARY KEY, namespace TEXT NOT NULL, name TEXT NOT NULL, plan TEXT NOT NULL)",
    "INSERT OR IGNORE INTO meta (key, value) VALUES ('rv', 1), ('horizon', 0)",
)


#: A resource type as the store keys it: the suite's one definition.
Kind = Resource
KINDS = {
    k.plural: k
    for k in (TRAINJOBS, TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES, PODS, EVENTS, SECRETS)
}


#: Every object of a kind, in every namespace.
_EVERY = Selector()


def _dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------ store


@dataclass(frozen=True)
class Change:
    """One entry of the change log."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    namespace: str
    data: str  # the object's JSON at that version
    #: A MODIFIED change's object before it (a selecting watch tells an object that
    #: left its selector by it); ``None`` for the others.
    prev: str | None = None


class Tx:
    """Reads and writes inside one transaction (see :meth:`Store.write`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.rv: int | None = None

    def current_rv(self) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()
        return int(row[0])

    def _next_rv(self) -> int:
        self.conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'rv'")
        self.rv = self.current_rv()
        return self.rv

    def column(self, column: str, kind: Kind, namespace: str | None, name: str) -> Any:
        """One column (``data``, ``rv``) of an object's row; ``None``: no such object."""
        row = self.conn.execute(
            f"SELECT {column} FROM objects WHERE resource = ? AND namespace = ? AND name = ?",
            (kind.plural, (namespace or "") if kind.namespaced else "", name),
        ).fetchone()
        return None if row is None else row[0]

    def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        data = self.column("data", kind, namespace, name)
        return None if data is None else dict(json.loads(data))

    def select(self, kind: Kind, selector: Selector = _EVERY, name_prefix: str = "") -> list[JSON]:
        """Matching objects; ``name_prefix`` narrows by name in SQL (a job's pods and
        events are named after it), before any JSON is parsed."""
        # Names are ASCII: every name starting with the prefix sorts below prefix+"\x7f".
        low, high = name_prefix, name_prefix + "\x7f"
        if selector.namespace is None or not kind.namespaced:
            rows = self.conn.execute(
                "SELECT data FROM objects WHERE resource = ? AND name >= ? AND name < ? "
                "ORDER BY namespace, name",
                (kind.plural, low, high),
            )
        else:
            rows = self.conn.execute(
                "SELECT data FROM objects WHERE resource = ? AND namespace = ? "
                "AND name >= ? AND name < ? ORDER BY name",
                (kind.plural, selector.namespace, low, high),
            )
        out = []
        for (data,) in rows:
            obj = json.loads(data)
            if selector.matches(obj):
                out.append(obj)
        return out

    def put(self, kind: Kind, obj: JSON, *, created: bool = False) -> JSON:
        """Store ``obj`` at a new version (ADDED when ``created``, else MODIFIED)."""
        meta = obj.setdefault("metadata", {})
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        data = _dump(obj)
        ns = str(meta.get("namespace") or "") if kind.namespaced else ""
        prev = None if created else self.column("data", kind, ns, str(meta["name"]))
        self.conn.execute(
            "INSERT OR REPLACE INTO objects (resource, namespace, name, rv, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (kind.plural, ns, str(meta["name"]), rv, data),
        )
        self._log(rv, kind, ns, "ADDED" if created else "MODIFIED", data, prev)
        return obj

    def taken(self, kind: Kind, namespace: str, name: str) -> bool:
        """Whether an object of that name exists (no JSON parsed)."""
        return self.column("1", kind, namespace, name) is not None

    def create(self, kind: Kind, obj: JSON) -> JSON:
        """Insert a new object as the registry does (:func:`~kf_trainer_core.emulation.
        strategy.prepare_create`: name, system metadata; 409 if taken)."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        new = prepare_create(kind, obj, namespace, lambda ns, name: self.taken(kind, ns, name))
        return self.put(kind, new, created=True)

    def delete(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        """Remove an object (a DELETED change carrying its last state)."""
        obj = self.get(kind, namespace, name)
        if obj is None:
            return None
        rv = self._next_rv()
        obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        ns = (namespace or "") if kind.namespaced else ""
        self.conn.execute(
            "DELETE FROM objects WHERE resource = ? AND namespace = ? AND name = ?",
            (kind.plural, ns, name),
        )
        self._log(rv, kind, ns, "DELETED", _dump(obj))
        return obj

    def _log(
        self, rv: int, kind: Kind, ns: str, kind_of_change: str, data: str, prev: str | None = None
    ) -> None:
        self.conn.execute(
            "INSERT INTO changes (rv, resource, namespace, type, data, prev) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (rv, kind.plural, ns, kind_of_change, data, prev),
        )
        if rv % PRUNE_EVERY == 0:
            self.prune(rv - KEEP_CHANGES)

    def prune(self, upto: int) -> None:
        """Forget changes up to version ``upto``: watches from before it get 410."""
        if upto <= 0:
            return
        self.conn.execute("DELETE FROM changes WHERE rv <= ?", (upto,))
        self.conn.execute("UPDATE meta SET value = max(value, ?) WHERE key = 'horizon'", (upto,))

    # -- run plans ------------------------------------------------------------
    def put_plan(self, uid: str, namespace: str, name: str, plan: JSON) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO runs (uid, namespace, name, plan) VALUES (?, ?, ?, ?)",
            (uid, namespace, name, _dump(plan)),
        )

    def delete_plan(self, uid: str) -> None:
        self.conn.execute("DELETE FROM runs WHERE uid = ?", (uid,))


class Store:
    """One connection to a state directory's database, safe to share between the
    threads of a process (calls are serialised by a lock)."""

    def __init__(self, path: str | Path, *, init_schema: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE for
        # writers), so that Python's sqlite3 never opens one behind our back.
        self.conn = sqlite3.connect(
            str(self.path),
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self.conn.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL loses no committed data on a process crash (only on power
        # loss), and costs a fraction of FULL's fsyncs.
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if init_schema:  # streams open a connection to a database known to exist
            with self.write() as tx:
                for statement in _SCHEMA:
                    tx.conn.execute(statement)
                columns = {row[1] for row in tx.conn.execute("PRAGMA table_info(changes)")}
                if "prev" not in columns:  # a state directory of an earlier version
                    tx.conn.execute("ALTER TABLE changes ADD COLUMN prev TEXT")

    def write(self) -> AbstractContextManager[Tx]:
        """A write transaction: other writers wait until it commits."""
        return self._transaction("BEGIN IMMEDIATE")

    def read(self) -> AbstractContextManager[Tx]:
        """A read transaction: one consistent snapshot across its queries."""
        return self._transaction("BEGIN")

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Tx]:
        # A failure rolls back (for a read that ends the snapshot, as COMMIT would).
        with self._lock:
            self.conn.execute(begin)
            try:
                yield Tx(self.conn)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    # -- conveniences ---------------------------------------------------------
    def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        with self.read() as tx:
            return tx.get(kind, namespace, name)

    def get_rv(self, kind: Kind, namespace: str | None, name: str) -> int | None:
        """The object's version without parsing it (cheap change detection)."""
        with self._lock:  # one SELECT: no transaction needed
            rv = Tx(self.conn).column("rv", kind, namespace, name)
        return None if rv is None else int(rv)

    def select(self, kind: Kind, selector: Selector = _EVERY) -> tuple[list[JSON], int]:
        """Matching objects and the version they are current at."""
        with self.read() as tx:
            return tx.select(kind, selector), tx.current_rv()

    def changes(
        self, kind: Kind, namespace: str | None, after: int, limit: int = 500
    ) -> tuple[list[Change], int, int]:
        """Changes of ``kind`` after version ``after``: ``(changes, current, horizon)``.
        When fewer than ``limit`` came back, nothing of ``kind`` changed between the
        last of them and ``current``."""
        with self.read() as tx:
            horizon = int(
                tx.conn.execute("SELECT value FROM meta WHERE key = 'horizon'").fetchone()[0]
            )
            # An empty namespace never matches: None means every namespace.
            rows = tx.conn.execute(
                "SELECT rv, type, namespace, data, prev FROM changes WHERE resource = ? "
                "AND (? IS NULL OR namespace = ?) AND rv > ? ORDER BY rv LIMIT ?",
                (kind.plural, namespace, namespace, after, limit),
            ).fetchall()
            current = tx.current_rv()
        return [Change(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows], current, horizon

    def get_plan(self, uid: str) -> JSON | None:
        run = self.get_run(uid)
        return None if run is None else run[2]

    def get_run(self, uid: str) -> tuple[str, str, JSON] | None:
        """The namespace, name and run plan stored for job ``uid``."""
        with self._lock:
            row = self.conn.execute(
                "SELECT namespace, name, plan FROM runs WHERE uid = ?", (uid,)
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), dict(json.loads(row[2])))

    def compact(self) -> None:
        """Forget the whole change log (tests: every older watch version gets 410)."""
        with self.write() as tx:
            tx.prune(tx.current_rv())

    def close(self) -> None:
        with self._lock:
            self.conn.close()
