"""Run a sweep: cells evaluated in a local process pool or on a Dask cluster, in order, with a
bounded number in flight, streamed to Parquet or CSV as they finish (memory stays bounded by the
window, whatever the grid size), written atomically."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import SpecError
from .cells import CATEGORY_COLUMNS, NUMBER_COLUMNS, evaluate_cell
from .spec import Cell, SweepSpec

FORMATS = {".parquet": "parquet", ".csv": "csv"}


@dataclass
class SweepSummary:
    """What a sweep did: cells, grid points evaluated, rows written, wall seconds, output file."""

    cells: int
    points: int
    rows: int
    seconds: float
    out: Path | None

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"cells": self.cells, "points": self.points, "rows": self.rows, "seconds": self.seconds,
                "points_per_s": self.points_per_s, "out": str(self.out) if self.out else None}


def _schema():
    import pyarrow as pa

    types = {"accelerators": pa.int64(), "mtp_depth": pa.int64(), "disaggregated": pa.bool_(), "tp": pa.int64(),
             "pp": pa.int64(), "ep": pa.int64(), "dp": pa.int64(), "feasible": pa.bool_(), "reason": pa.int16()}
    fields = [pa.field(c, pa.dictionary(pa.int32(), pa.string())) for c in CATEGORY_COLUMNS]
    fields += [pa.field(c, types.get(c, pa.float64())) for c in NUMBER_COLUMNS]
    return pa.schema(fields)


def to_table(out: dict[str, Any]):
    """A cell's output as a pyarrow Table with the sweep schema (constants repeated)."""
    import numpy as np
    import pyarrow as pa

    n = out["rows"]
    cols: dict[str, Any] = dict(out["columns"])
    cols["optimizations"] = pa.DictionaryArray.from_arrays(pa.array(out["variant"], type=pa.int32()),
                                                           pa.array(out["variant_labels"], type=pa.string()))
    for key, value in out["constants"].items():
        if isinstance(value, str):  # one dictionary entry, every row pointing at it
            cols[key] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value]))
        else:
            cols[key] = np.full(n, value)
    schema = _schema()
    arrays = [cols[f.name] if isinstance(cols[f.name], pa.Array) else pa.array(cols[f.name], type=f.type)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _ordered(submit: Callable[[Cell], Any], cells: Iterable[Cell], window: int) -> Iterator[Any]:
    """Results of ``submit(cell)`` futures in cell order, with at most ``window`` in flight."""
    it = iter(cells)
    pending = deque(submit(c) for c in islice(it, window))
    while pending:
        result = pending.popleft().result()
        nxt = next(it, None)
        if nxt is not None:
            pending.append(submit(nxt))
        yield result


class _Writer:
    """Streams tables into ``path`` through a temporary file renamed at the end."""

    def __init__(self, path: Path):
        suffix = path.suffix.lower()
        if suffix not in FORMATS:
            raise SpecError(f"--out must end in .parquet or .csv (got '{path.name}')")
        self.path, self.kind = path, FORMATS[suffix]
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._w = None

    def write(self, table) -> None:
        if self._w is None:
            if self.kind == "parquet":
                import pyarrow.parquet as pq

                self._w = pq.ParquetWriter(self.tmp, table.schema, compression="snappy")
            else:
                import pyarrow.csv as pc

                self._w = pc.CSVWriter(self.tmp, table.schema)
        self._w.write_table(table)

    def close(self, ok: bool) -> None:
        if self._w is not None:
            self._w.close()
        if ok:
            if self._w is None:  # an empty sweep still gives a file with the header
                import pyarrow as pa

                self.write(pa.Table.from_pylist([], schema=_schema()))
                self._w.close()
            os.replace(self.tmp, self.path)
        elif self.tmp.exists():
            self.tmp.unlink()


def _check_limit_axes(spec: SweepSpec) -> None:
    """Bad input before any cell runs: latency-limit axes on a scenario without limits (Offline)."""
    given = {k: next((v for v in getattr(spec, k) if v is not None), None) for k in ("ttft_ms", "tpot_ms")}
    if not any(v is not None for v in given.values()):
        return
    from ..query import apply_slo
    from ..specs import catalog

    for sc in spec.scenario:
        apply_slo(catalog.load("scenario", sc), catalog.profile_id("scenario", sc), given)


def run(spec: SweepSpec, out: Path | None = None, *, workers: int | None = None, scheduler: str | None = None,
        progress: Callable[[int, int, int], None] | None = None, collect: bool = False):
    """Evaluate every cell of ``spec``.

    Parameters
    ----------
    out : Parquet or CSV file the rows stream into (None: nothing written).
    workers : local processes (default: the CPU count; 1 evaluates in this process).
    scheduler : address of a running Dask distributed scheduler (``tcp://host:port``), or a
        ``distributed.Client``; cells then run on that cluster.
    progress : called as ``progress(cells_done, cells_total, points_done)``.
    collect : also return every row as one pyarrow Table (memory grows with the output).

    Returns
    -------
    (SweepSummary, Table or None)
    """
    _check_limit_axes(spec)
    cells = spec.cells()
    start = time.perf_counter()
    writer = _Writer(Path(out)) if out is not None else None
    kept = [] if collect else None
    points = rows = 0
    ok = False
    pool = client = None
    try:
        if scheduler is not None:
            client = _client(scheduler)
            window = 2 * max(sum(client.nthreads().values()), 1)
            results = _ordered(lambda c: client.submit(evaluate_cell, c, pure=False), cells, window)
        else:
            n = workers or os.cpu_count() or 1
            if n > 1 and len(cells) > 1:
                from concurrent.futures import ProcessPoolExecutor

                pool = ProcessPoolExecutor(max_workers=n)
                results = _ordered(lambda c: pool.submit(evaluate_cell, c), cells, 2 * n)
            else:
                results = (evaluate_cell(c) for c in cells)
        for k, res in enumerate(results, 1):
            points += res["points"]
            rows += res["rows"]
            if writer is not None or kept is not None:
                table = to_table(res)
                if writer is not None:
                    writer.write(table)
                if kept is not None:
                    kept.append(table)
            if progress:
                progress(k, len(cells), points)
        ok = True
    finally:
        if writer is not None:
            writer.close(ok)
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if client is not None and isinstance(scheduler, str):
            client.close()
    summary = SweepSummary(len(cells), points, rows, time.perf_counter() - start, Path(out) if out else None)
    table = None
    if kept is not None:
        import pyarrow as pa

        table = pa.concat_tables(kept) if kept else pa.Table.from_pylist([], schema=_schema())
    return summary, table


def _client(scheduler):
    """A Dask client for an address (or the client itself)."""
    if not isinstance(scheduler, str):
        return scheduler
    try:
        from distributed import Client
    except ImportError:
        raise SpecError("--scheduler needs the Dask distributed package: pip install 'infersim[cluster]'") from None
    try:
        return Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as err:
        raise SpecError(f"--scheduler: cannot reach a Dask scheduler at {scheduler} ({err})") from None
