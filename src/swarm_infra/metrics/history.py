"""Run history in an embedded SQLite database (default ``.swarm/metrics.db``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from swarm_infra.metrics.measurement import Measurement

DEFAULT_DB = Path(".swarm/metrics.db")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  started_at TEXT NOT NULL,          -- ISO 8601 UTC, as given by the caller
  fleet TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  tool TEXT NOT NULL,
  field TEXT NOT NULL,
  unit TEXT NOT NULL,
  labels TEXT NOT NULL,              -- JSON list of [key, value] pairs, sorted
  value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_run ON measurements(run_id);
"""


class History:
    """Runs and their measurements in one SQLite file; the parent directory is made on open.

    Raises sqlite3.Error when the file is not a database.
    """

    def __init__(self, path: Path | str = DEFAULT_DB) -> None:
        path = Path(path)
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path))
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def record(self, fleet: str, started_at: str, measurements: list[Measurement]) -> int:
        """Store one run; returns its id (ids grow with each run)."""
        with self._db:
            cur = self._db.execute("INSERT INTO runs (started_at, fleet) VALUES (?, ?)", (started_at, fleet))
            run_id = int(cur.lastrowid or 0)
            self._db.executemany(
                "INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, m.tool, m.field, m.unit, json.dumps(m.labels), m.value) for m in measurements],
            )
        return run_id

    def runs(self, fleet: str) -> list[tuple[int, str]]:
        """(id, started_at) of the fleet's runs, oldest first."""
        rows = self._db.execute("SELECT id, started_at FROM runs WHERE fleet = ? ORDER BY id", (fleet,))
        return [(int(i), str(t)) for i, t in rows]

    def measurements(self, run_id: int) -> list[Measurement]:
        """The measurements of one run, in the order they were stored."""
        rows = self._db.execute(
            "SELECT tool, field, value, unit, labels FROM measurements WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        )
        return [
            Measurement(tool, field, float(value), unit, tuple((k, v) for k, v in json.loads(labels)))
            for tool, field, value, unit, labels in rows
        ]

    def previous(self, fleet: str, run_id: int) -> int | None:
        """The id of the fleet's run just before ``run_id``, or None for its first run."""
        row = self._db.execute(
            "SELECT MAX(id) FROM runs WHERE fleet = ? AND id < ?", (fleet, run_id)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])
