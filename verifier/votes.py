"""The verifier's memory of what it voted: never vote twice, even across crashes and restarts.

A SQLite database in the verifier's home (`votes.sqlite`, WAL journal, every change committed before the next
step) with one row per (task, round, worker, segment):

    reserved    the verdict is decided and the signed transaction is stored, not yet handed to the node
    broadcast   the node accepted it into its mempool (tx hash known)
    included    it is in a block with code 0
    rejected    the block or CheckTx refused it (the log says why); not retried automatically

The row is written *before* the transaction is broadcast and holds the exact signed bytes, so a restart
re-sends those same bytes (same nonce, same signature) instead of signing a second vote. A validator's votes
of one pass on one round share one transaction (several rows, the same signed bytes). Beside each vote the
`replays` table keeps the salt and replay digest its commitment hides, written with the vote, until the reveal
(`reveal`: '' not yet, `sent`, `refused`, `missed` when the window closed first, `late` when the chain
accepted the vote without counting it, the segment being decided already). `attempts` counts
failed tries to fetch a segment's checkpoints, so the retry budget before voting UNAVAILABLE survives a
restart too.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sqlite3
import time

from .errors import VoteRecordError

RESERVED, BROADCAST, INCLUDED, REJECTED = "reserved", "broadcast", "included", "rejected"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    task_id INTEGER NOT NULL, round INTEGER NOT NULL, worker TEXT NOT NULL, segment INTEGER NOT NULL,
    verdict INTEGER NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL, evidence_hash TEXT NOT NULL,
    signed_tx BLOB NOT NULL, tx_hash TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, height INTEGER NOT NULL DEFAULT 0,
    log TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
    PRIMARY KEY (task_id, round, worker, segment)
);
CREATE TABLE IF NOT EXISTS replays (
    task_id INTEGER NOT NULL, round INTEGER NOT NULL, worker TEXT NOT NULL, segment INTEGER NOT NULL,
    salt TEXT NOT NULL, digest TEXT NOT NULL, reveal TEXT NOT NULL DEFAULT '', tx_hash TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (task_id, round, worker, segment)
);
CREATE TABLE IF NOT EXISTS attempts (
    task_id INTEGER NOT NULL, round INTEGER NOT NULL, worker TEXT NOT NULL, segment INTEGER NOT NULL,
    attempts INTEGER NOT NULL, last_error TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (task_id, round, worker, segment)
);
"""

Key = tuple[int, int, str, int]


@dataclasses.dataclass(frozen=True)
class VoteRow:
    key: Key
    verdict: int
    outcome: str
    reason: str
    evidence_hash: str
    signed_tx: bytes
    tx_hash: str
    status: str
    height: int
    log: str


class VoteRecord:
    def __init__(self, path: str | pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as error:
            raise VoteRecordError(f"cannot open the vote record {self.path}: {error}") from None

    def close(self) -> None:
        self._db.close()

    def _execute(self, sql: str, parameters: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, parameters)
        except sqlite3.Error as error:
            raise VoteRecordError(f"vote record {self.path}: {error}") from None

    def get(self, key: Key) -> VoteRow | None:
        row = self._execute("SELECT verdict, outcome, reason, evidence_hash, signed_tx, tx_hash, status, height, log "
                            "FROM votes WHERE task_id=? AND round=? AND worker=? AND segment=?", key).fetchone()
        return None if row is None else VoteRow(key, *row)

    def reserve(self, key: Key, verdict: int, outcome: str, reason: str, evidence_hash: str, signed_tx: bytes) -> bool:
        """Record the decided vote before sending it; False if this segment already has a vote (never twice)."""
        try:
            self._db.execute(
                "INSERT INTO votes (task_id, round, worker, segment, verdict, outcome, reason, evidence_hash, signed_tx,"
                " status, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, verdict, outcome, reason, evidence_hash, signed_tx, RESERVED, time.time()))
        except sqlite3.IntegrityError:
            return False
        except sqlite3.Error as error:
            raise VoteRecordError(f"vote record {self.path}: {error}") from None
        return True

    def reserve_batch(self, votes: list[tuple[Key, int, str, str, str, bytes, bytes]], signed_tx: bytes) -> bool:
        """Record several votes sent in one transaction, each (key, verdict, outcome, reason, evidence hash, salt,
        replay digest), all or none; False if any of the segments already has a vote."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for key, verdict, outcome, reason, evidence_hash, salt, digest in votes:
                self._db.execute(
                    "INSERT INTO votes (task_id, round, worker, segment, verdict, outcome, reason, evidence_hash,"
                    " signed_tx, status, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, verdict, outcome, reason, evidence_hash, signed_tx, RESERVED, time.time()))
                self._db.execute("INSERT OR REPLACE INTO replays (task_id, round, worker, segment, salt, digest)"
                                 " VALUES (?, ?, ?, ?, ?, ?)", (*key, salt.hex(), digest.hex()))
            self._db.execute("COMMIT")
        except sqlite3.IntegrityError:
            self._db.execute("ROLLBACK")
            return False
        except sqlite3.Error as error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise VoteRecordError(f"vote record {self.path}: {error}") from None
        return True

    def unrevealed(self) -> list[tuple[Key, bytes, bytes]]:
        """(key, salt, digest) of included votes whose replay digest is not revealed yet."""
        rows = self._execute(
            "SELECT r.task_id, r.round, r.worker, r.segment, r.salt, r.digest FROM replays r JOIN votes v USING"
            " (task_id, round, worker, segment) WHERE r.reveal='' AND v.status=?", (INCLUDED,)).fetchall()
        return [((t, r, w, s), bytes.fromhex(salt), bytes.fromhex(digest)) for t, r, w, s, salt, digest in rows]

    def mark_revealed(self, keys: list[Key], reveal: str, tx_hash: str = "") -> None:
        for key in keys:
            self._execute("UPDATE replays SET reveal=?, tx_hash=? WHERE task_id=? AND round=? AND worker=? AND segment=?",
                          (reveal, tx_hash, *key))

    def reveal_counts(self) -> dict[str, int]:
        return dict(self._execute("SELECT reveal, COUNT(*) FROM replays GROUP BY reveal").fetchall())

    def mark(self, key: Key, status: str, *, tx_hash: str = "", height: int = 0, log: str = "") -> None:
        self._execute("UPDATE votes SET status=?, tx_hash=CASE WHEN ?='' THEN tx_hash ELSE ? END, height=?, log=? "
                      "WHERE task_id=? AND round=? AND worker=? AND segment=?",
                      (status, tx_hash, tx_hash, height, log, *key))

    def release(self, key: Key) -> None:
        """Drop a vote that provably never reached a mempool (CheckTx refused its nonce), so it can be redone."""
        self._execute("DELETE FROM votes WHERE task_id=? AND round=? AND worker=? AND segment=? AND status IN (?, ?)",
                      (*key, RESERVED, BROADCAST))
        self._execute("DELETE FROM replays WHERE task_id=? AND round=? AND worker=? AND segment=? AND reveal=''", key)

    def unfinished(self) -> list[VoteRow]:
        """Votes reserved or broadcast but not seen in a block yet (to resume after a restart)."""
        rows = self._execute("SELECT task_id, round, worker, segment FROM votes WHERE status IN (?, ?)",
                             (RESERVED, BROADCAST)).fetchall()
        return [self.get(tuple(row)) for row in rows]

    def voted_keys(self) -> set[Key]:
        return {tuple(row) for row in self._execute("SELECT task_id, round, worker, segment FROM votes").fetchall()}

    def counts(self) -> dict[str, int]:
        """Votes by outcome and by status, for progress lines."""
        result: dict[str, int] = {}
        for column in ("outcome", "status"):
            for value, count in self._execute(f"SELECT {column}, COUNT(*) FROM votes GROUP BY {column}").fetchall():
                result[value] = result.get(value, 0) + count
        return result

    def add_attempt(self, key: Key, error: str) -> int:
        """Count one failed fetch of this segment; returns the total so far."""
        self._execute(
            "INSERT INTO attempts (task_id, round, worker, segment, attempts, last_error, updated) VALUES (?, ?, ?, ?, 1, ?, ?) "
            "ON CONFLICT (task_id, round, worker, segment) DO UPDATE SET attempts=attempts+1, last_error=excluded.last_error,"
            " updated=excluded.updated", (*key, error, time.time()))
        return self.attempts(key)

    def attempts(self, key: Key) -> int:
        row = self._execute("SELECT attempts FROM attempts WHERE task_id=? AND round=? AND worker=? AND segment=?",
                            key).fetchone()
        return 0 if row is None else int(row[0])
