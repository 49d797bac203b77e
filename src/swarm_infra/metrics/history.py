"""Run history in an embedded SQLite database (default ``.swarm/metrics.db``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
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
CREATE TABLE IF NOT EXISTS run_info (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id),
  parts TEXT NOT NULL,               -- JSON list: the parts the run measured
  nodes TEXT,                        -- JSON list: the nodes it measured; NULL: not said (import)
  options TEXT NOT NULL,             -- JSON object: the run's options
  tool_versions TEXT NOT NULL,       -- JSON object: tool -> version as reported -> [nodes]
  fleet_commit TEXT                  -- git rev-parse HEAD of the fleet's repository, or NULL
);
CREATE TABLE IF NOT EXISTS not_measured (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  node TEXT NOT NULL,
  part TEXT NOT NULL,
  what TEXT NOT NULL,
  why TEXT NOT NULL,
  failed INTEGER NOT NULL            -- 1: something went wrong; 0: not applicable
);
"""


@dataclass(frozen=True)
class RunInfo:
    """What a run was, beside its figures: the ``parts`` it measured and the ``nodes`` it
    measured (None: not said, as for ``swarm metrics import``), its ``options`` (the knobs of
    ``fleetrun.Options`` and the like: durations, counts), ``tool_versions`` (tool -> the
    version as the tool reports it -> the nodes that reported it), the fleet repository's
    commit (``git rev-parse HEAD``; None outside a Git repository) and ``not_measured``
    (dicts: node, part, what, why, failed). Runs recorded by earlier versions have none."""

    parts: tuple[str, ...]
    nodes: tuple[str, ...] | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    tool_versions: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    fleet_commit: str | None = None
    not_measured: tuple[Mapping[str, object], ...] = ()


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

    def record(
        self, fleet: str, started_at: str, measurements: list[Measurement], info: RunInfo | None = None
    ) -> int:
        """Store one run (with what it was, ``info``); returns its id (ids grow with each run)."""
        with self._db:
            cur = self._db.execute("INSERT INTO runs (started_at, fleet) VALUES (?, ?)", (started_at, fleet))
            run_id = int(cur.lastrowid or 0)
            self._db.executemany(
                "INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, m.tool, m.field, m.unit, json.dumps(m.labels), m.value) for m in measurements],
            )
            if info is not None:
                self._db.execute(
                    "INSERT INTO run_info VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        json.dumps(list(info.parts)),
                        None if info.nodes is None else json.dumps(list(info.nodes)),
                        json.dumps(dict(info.options), sort_keys=True, default=str),
                        json.dumps(info.tool_versions, sort_keys=True),
                        info.fleet_commit,
                    ),
                )
                self._db.executemany(
                    "INSERT INTO not_measured VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (
                            run_id,
                            str(n["node"]),
                            str(n["part"]),
                            str(n["what"]),
                            str(n["why"]),
                            int(bool(n["failed"])),
                        )
                        for n in info.not_measured
                    ],
                )
        return run_id

    def info(self, run_id: int) -> RunInfo | None:
        """What the run was (:class:`RunInfo`); None for a run recorded without it."""
        row = self._db.execute(
            "SELECT parts, nodes, options, tool_versions, fleet_commit FROM run_info WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        parts, nodes, options, versions, commit = row
        missing = self._db.execute(
            "SELECT node, part, what, why, failed FROM not_measured WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        )
        return RunInfo(
            parts=tuple(json.loads(parts)),
            nodes=None if nodes is None else tuple(json.loads(nodes)),
            options=json.loads(options),
            tool_versions=json.loads(versions),
            fleet_commit=commit,
            not_measured=tuple(
                {"node": n, "part": p, "what": w, "why": y, "failed": bool(f)} for n, p, w, y, f in missing
            ),
        )

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
