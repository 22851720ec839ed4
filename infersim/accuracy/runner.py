"""One runner that predicts published rows with :func:`infersim.api.predict`.

Specs and presets are passed to ``predict`` as objects: a trial value of a hardware efficiency is
a ``model_copy`` of the profile, a trial round maturity a ``model_copy`` of the preset; nothing is
written to disk per trial. Predictions are cached per (key, trial values, pinned choices), and
uncached ones can run in forked worker processes. ``validate`` predicts every row of a data set.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NamedTuple

from ..errors import InfeasibleError, SpecError
from .data import PredictionKey, Row, as_rows, frontier_mask, row_keys

Values = tuple[tuple[str, float], ...]
"""Trial values of one owner's parameters, sorted by name (hashable); () = the file's values."""


class Lock(NamedTuple):
    """A prediction's search pinned to what an earlier full search chose (faster re-evaluation)."""

    enable: tuple[str, ...]
    """Optional round transforms switched on."""
    disable: tuple[str, ...]
    """Optional round transforms switched off."""
    mtp_depth: int
    """MTP depth when MTP is enabled (0 otherwise)."""
    layout: tuple[int, int, int, int] | None
    """(tp, pp, ep, dp) of one aggregated instance, or of a disaggregated deployment's decode
    worker; None where the layout stays searched."""
    disagg: tuple[int, int, int] | None = None
    """A disaggregated deployment's (accelerators per prefill worker, prefill workers, decode
    workers); None for an aggregated one (the prefill worker's layout within its size stays
    chosen by ``disagg_eval``, as the full search chooses it)."""


class Outcome(NamedTuple):
    """One prediction: tokens/s (None with a reason) and the lock that reproduces its choices."""

    value: float | None
    reason: str
    lock: Lock | None


class Runner:
    """Predicts keys under trial parameter values, with caches and an optional process pool.

    Parameters
    ----------
    presets_dir : folder of round presets ``vX.Y.yaml`` (default: the bundled presets).
    hardware_override : mapping hardware ID → HardwareSpec used instead of the profile (e.g. a
        calibrated copy); trial values are applied on top of it.
    """

    def __init__(self, presets_dir: str | os.PathLike | None = None,
                 hardware_override: Mapping[str, Any] | None = None):
        self.presets_dir = presets_dir
        self.hardware_override = dict(hardware_override or {})
        self._inputs: dict[tuple[str, str, str], Any] = {}
        self._presets: dict[tuple[str, Values], Any] = {}
        self._hardware: dict[tuple[str, Values], Any] = {}
        self.cache: dict[tuple, Outcome] = {}
        self._cost: dict[tuple, float] = {}
        self.calls = 0
        self.pool = None
        self.workers = 1

    # ---- specs under trial values -------------------------------------------------------------
    def base_hardware(self, hw_id: str):
        from ..specs import catalog

        return self.hardware_override.get(hw_id) or catalog.load_hardware(hw_id)

    def hardware(self, hw_id: str, values: Values = ()):
        key = (hw_id, values)
        if key not in self._hardware:
            base = self.base_hardware(hw_id)
            if values:
                base = base.model_copy(update={"efficiency": base.efficiency.model_copy(update=dict(values))})
            self._hardware[key] = base
        return self._hardware[key]

    def preset(self, round_name: str, values: Values = ()):
        key = (round_name, values)
        if key not in self._presets:
            from ..optimizations.presets import load_preset

            if values:
                self._presets[key] = self.preset(round_name).model_copy(update=dict(values))
            else:
                self._presets[key] = load_preset(round_name, self.presets_dir)
        return self._presets[key]

    def inputs(self, key: PredictionKey, hw_values: Values = ()):
        from .. import api

        ids = (key.hardware, key.model, key.scenario)
        if ids not in self._inputs:
            self._inputs[ids] = api.load_inputs(key.hardware, key.model, key.scenario)
        base = self._inputs[ids]
        if hw_values or key.hardware in self.hardware_override:
            return replace(base, hardware=self.hardware(key.hardware, hw_values))
        return base

    # ---- one prediction -----------------------------------------------------------------------
    def predict(self, key: PredictionKey, hw_values: Values = (), round_values: Values = (),
                lock: Lock | None = None, occupancy: float | tuple[float, ...] | None = None,
                osl_mean: float | None = None, run: tuple[tuple[str, str], ...] = ()) -> Outcome:
        """Tokens/s of ``key`` under trial values (cached); failures become reasons.

        With ``occupancy`` (mean sequences in flight over the whole system, or a tuple of them) and
        a ``lock`` with a layout: the mean time per output token, seconds (a tuple for a tuple), of
        that pinned aggregated configuration at that occupancy instead (``tpot_at``), with the
        scenario's output lengths scaled to mean ``osl_mean`` where given (a run's own) and the
        run's own engine settings and layout where ``run`` gives them (``run_settings.run_fields``)."""
        ckey = (key, hw_values, round_values, lock, occupancy, osl_mean, run)
        hit = self._lookup(ckey)
        if hit is not None:
            self.cache[ckey] = hit
            return hit
        self.calls += 1
        if occupancy is not None:
            out = self.tpot_at(key, hw_values, round_values, lock, occupancy, osl_mean, run)
            self.cache[ckey] = out
            return out
        out = self._predict(key, hw_values, round_values, lock)
        if lock is not None and out.value is None and out.reason.startswith("bad input"):
            out = self._predict(key, hw_values, round_values, None)  # pinned choices refused: search them
        self.cache[ckey] = out
        return out

    def _lookup(self, ckey: tuple) -> Outcome | None:
        """The cached outcome of ``ckey``; for a search that only switches optional transforms off,
        also the unrestricted search's cached outcome at the same values where that applied none
        of them (its best configuration is then also the restricted search's: the same candidates
        but the disabled ones, priced alike)."""
        hit = self.cache.get(ckey)
        if hit is not None:
            return hit
        key, hw_values, round_values, lock, occupancy = ckey[:5]
        if lock is None or occupancy is not None or lock.enable or lock.mtp_depth or lock.layout is not None:
            return None
        full = self.cache.get((key, hw_values, round_values, None, None, None, ()))
        if full is None or full.lock is None or set(lock.disable) & set(full.lock.enable):
            return None
        return full

    def _predict(self, key, hw_values, round_values, lock) -> Outcome:
        from .. import api

        kwargs = {} if lock is None else self._lock_kwargs(lock)
        try:
            preset = self.preset(key.preset, round_values)
            pred = api.predict(key.hardware, key.model, key.scenario, key.accelerators, round=key.preset,
                               inputs=self.inputs(key, hw_values), preset=preset, **kwargs)
        except SpecError as exc:
            return Outcome(None, f"bad input: {exc}", None)
        except InfeasibleError as exc:
            return Outcome(None, f"infeasible: {exc}", None)
        except Exception as exc:  # a model failure on one row must not hide the others; it is reported
            return Outcome(None, f"internal error: {type(exc).__name__}: {exc}", None)
        if not pred.feasible:
            return Outcome(None, f"infeasible: {pred.reason}", None)
        value = float(pred.metrics.get("tokens_per_s", 0.0))
        if not math.isfinite(value) or value <= 0:
            return Outcome(None, f"internal error: non-positive prediction {value!r}", None)
        return Outcome(value, "", self._lock_of(preset, pred.config))

    def tpot_at(self, key: PredictionKey, hw_values: Values, round_values: Values, lock: Lock | None,
                occupancy: float | tuple[float, ...], osl_mean: float | None = None,
                run: tuple[tuple[str, str], ...] = ()) -> Outcome:
        """Mean TPOT (seconds) of the configuration ``lock`` pins, at ``occupancy`` sequences in
        flight over the system (spread evenly over its instances): ``scheduler.server`` at the
        per-instance occupancy, no search; a tuple of occupancies is one array evaluation and gives
        a tuple. ``lock`` must name an aggregated layout. ``run``: the run's own engine settings
        (``run_settings.run_engine``) replace the preset's, and its own layout
        (``run_settings.run_layout``), where it fits, the lock's, as ``infersim validate --at-load
        --run-engine`` prices it; the lock's transforms stay."""
        import numpy as np

        from .. import api
        from .. import optimizations as opt
        from ..graph import Layout
        from ..parallel import replicas
        from ..query import Query
        from ..scheduler import server
        from ..serving import WorkloadStats

        if lock is None or lock.layout is None or lock.disagg is not None:
            return Outcome(None, "bad input: an operating point needs a pinned aggregated layout", None)
        tp, pp, ep, dp = lock.layout
        try:
            inputs = self.inputs(key, hw_values)
            query = Query.build(key.hardware, key.model, key.scenario, key.accelerators, round=key.preset,
                                inputs=inputs, preset=self.preset(key.preset, round_values), **self._lock_kwargs(lock))
            variants = [v for v in api.selection(query).variants()]
            if len(variants) != 1:
                return Outcome(None, f"bad input: the lock leaves {len(variants)} optimization variants", None)
            plan = opt.apply_all(api.base_plan(query.inputs, query.software, query.layout), variants[0])
            lay = Layout(tp=tp, pp=pp, ep=ep, dp=dp)
            stats = WorkloadStats.from_workload(inputs.scenario.workload, inputs.model).with_output_mean(osl_mean)
            if run:
                from ..run_settings import apply_run

                plan, own = apply_run(plan, dict(run), stats, key.accelerators)
                if own is not None:
                    tp, pp, ep, dp = own["tp"], own["pp"], own["ep"], own["dp"]
                    lay = Layout(tp=tp, pp=pp, ep=ep, dp=dp)
            n_inst = int(replicas(lay, key.accelerators, plan.hardware.scale_up.domain_size))
            if n_inst < 1:
                return Outcome(None, "bad input: the pinned layout does not fit the accelerators", None)
            occ = np.atleast_1d(np.asarray(occupancy, dtype=float))
            res = server(plan, lay, occ / n_inst, stats, 99.0, key.accelerators / (tp * pp), means_only=True)
            values = np.broadcast_to(np.asarray(res.tpot_mean, dtype=float), occ.shape)
        except SpecError as exc:
            return Outcome(None, f"bad input: {exc}", None)
        except Exception as exc:  # a model failure on one row must not hide the others; it is reported
            return Outcome(None, f"internal error: {type(exc).__name__}: {exc}", None)
        if not np.all(np.isfinite(values) & (values > 0)):
            return Outcome(None, f"internal error: non-positive TPOT {values.tolist()!r}", None)
        return Outcome(tuple(float(v) for v in values) if isinstance(occupancy, tuple) else float(values[0]), "", lock)

    @staticmethod
    def _lock_kwargs(lock: Lock) -> dict[str, Any]:
        """``predict`` / ``Query.build`` keywords that pin ``lock``'s choices, MTP depth, layout and
        disaggregated split."""
        kwargs: dict[str, Any] = {"enable": list(lock.enable), "disable": list(lock.disable)}
        params: dict[str, dict[str, int]] = {}
        if lock.mtp_depth and "mtp" in lock.enable:
            params["mtp"] = {"depth": lock.mtp_depth}
        if lock.disagg is not None:
            params["disagg"] = dict(zip(("prefill_tp", "prefill_workers", "decode_workers"), lock.disagg))
        if params:
            kwargs["params"] = params
        if lock.layout is not None:
            kwargs.update(zip(("tp", "pp", "ep", "dp"), lock.layout))
        return kwargs

    @staticmethod
    def _lock_of(preset, config: Mapping[str, Any]) -> Lock:
        choices = [c.get("kind") for c in preset.choices]
        applied = set(config.get("optimizations", ()))
        enable = tuple(k for k in choices if k in applied)
        disable = tuple(k for k in choices if k not in applied)
        depth = int(config.get("mtp_depth", 0) or 0) if "mtp" in enable else 0
        layout = tuple(int(config[k]) for k in ("tp", "pp", "ep", "dp"))
        disagg = None
        if config.get("disaggregated"):  # the decode workers' layout and the split, as chosen
            from ..disagg_load import deployment

            _, d, pre, p = deployment(config)
            disagg = (pre.tp * pre.pp, p, d)
        return Lock(enable, disable, depth, layout, disagg)

    # ---- many predictions ---------------------------------------------------------------------
    def predict_many(self, tasks: Sequence[tuple], progress: Callable[[int, int], None] | None = None) -> list[Outcome]:
        """``predict(*task)`` for each task; uncached ones in the pool when one is running."""
        todo = list(dict.fromkeys(t for t in tasks if self._lookup(self._ckey(t)) is None))
        if self.pool is not None and len(todo) >= 2 * self.workers:
            global _POOL_RUNNER
            _POOL_RUNNER = self  # workers fork at the pool's first use and inherit this
            # the costliest first (by the same task's last time under other values), so that the
            # workers finish together
            todo.sort(key=lambda t: -self._cost.get(self._shape(t), math.inf))
            try:
                chunk = max(1, len(todo) // (64 * self.workers))
                for n, (task, (out, seconds)) in enumerate(zip(todo, self.pool.map(_pool_predict, todo,
                                                                                   chunksize=chunk)), 1):
                    self.cache[self._ckey(task)] = out
                    self._cost[self._shape(task)] = seconds
                    if progress is not None:
                        progress(n, len(todo))
                self.calls += len(todo)
            except (OSError, RuntimeError):  # a broken pool: carry on in this process
                self.pool = None
        out = []
        for n, t in enumerate(tasks, 1):
            out.append(self.predict(*t))
            if progress is not None and self.pool is None:
                progress(n, len(tasks))
        return out

    def remember(self, task: tuple, outcome: Outcome) -> None:
        """Cache ``outcome`` as ``task``'s (an outcome known to be the same, e.g. a full search's for
        the search pinned to its own choices)."""
        self.cache[self._ckey(task)] = outcome

    @staticmethod
    def _ckey(task: tuple) -> tuple:
        return tuple(task) + ((), (), None, None, None, ())[len(task) - 1:]

    @classmethod
    def _shape(cls, task: tuple) -> tuple:
        """A task without its trial values: what its cost depends on."""
        ckey = cls._ckey(task)
        return (ckey[0],) + ckey[3:]

    def start_pool(self, workers: int) -> None:
        """Predict uncached keys in ``workers`` forked processes (no-op for 1 or without fork)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if workers <= 1 or self.pool is not None or "fork" not in multiprocessing.get_all_start_methods():
            return
        from .. import api  # noqa: F401  (imported once, before the workers fork and inherit it)

        try:
            self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
            self.workers = workers
        except (OSError, ValueError, RuntimeError):
            self.pool = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_POOL_RUNNER: Runner | None = None
"""The runner forked worker processes inherit (set just before the pool's first use)."""


def _pool_predict(task: tuple) -> tuple[Outcome, float]:
    t0 = time.perf_counter()
    return _POOL_RUNNER.predict(*task), time.perf_counter() - t0


def default_workers(n_tasks: int) -> int:
    """Processes for ``n_tasks`` predictions: 1 for small jobs or without ``fork``, else one per
    CPU (at most 4)."""
    import multiprocessing

    if n_tasks <= 32 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(4, os.cpu_count() or 1, n_tasks // 16))


@contextmanager
def runner_for(runner: "Runner | None", presets_dir, workers: int | None, n_tasks: int) -> Iterator["Runner"]:
    """``runner`` itself when given (its owner closes it), else a new runner whose worker pool is
    sized for ``n_tasks`` predictions (``workers`` overrides) and closed on exit."""
    if runner is not None:
        yield runner
        return
    run = Runner(presets_dir)
    try:
        run.start_pool(default_workers(n_tasks) if workers is None else workers)
        yield run
    finally:
        run.close()


# ---------------------------------------------------------------------------------------------
# Validation: every row of a data set


Predictor = Callable[[PredictionKey], "float | tuple[float | None, str]"]
"""A replacement prediction function: key → tokens/s, or (tokens/s or None, reason)."""


def _call_predictor(predictor: Predictor, key: PredictionKey) -> tuple[float | None, str]:
    try:
        out = predictor(key)
    except SpecError as exc:
        return None, f"bad input: {exc}"
    except InfeasibleError as exc:
        return None, f"infeasible: {exc}"
    value, reason = (out[0], str(out[1])) if isinstance(out, tuple) else (out, "")
    if value is None:
        return None, reason or "no prediction"
    return float(value), reason


def validate(rows: Iterable[Row] | str | os.PathLike, *, progress: Callable[[int, int], None] | None = None,
             hardware_override: Mapping[str, Any] | None = None, presets_dir: str | os.PathLike | None = None,
             predictor: Predictor | None = None, workers: int | None = None):
    """Predict every row and compare with the published tokens/s.

    Parameters
    ----------
    rows : rows from :func:`infersim.accuracy.load_rows` (or a CSV path).
    progress : called as ``progress(done, total)`` after each distinct prediction.
    hardware_override : mapping hardware ID → HardwareSpec used instead of the profile.
    presets_dir : folder of round presets ``vX.Y.yaml`` (default: the bundled presets).
    predictor : replaces :func:`infersim.api.predict` (``key -> tokens/s`` or ``key -> (tokens/s
        or None, reason)``); for tests and what-if studies.
    workers : processes for the distinct predictions (default: :func:`default_workers`).

    Returns
    -------
    ValidationReport with one result per row, in input order.

    Notes
    -----
    Each row is predicted as ``predict(hardware, model, f"mlperf-{model}-{scenario}",
    accelerators, round=preset)`` where ``preset`` is the row's version or the nearest earlier
    round with a preset; rows sharing a (preset, hardware, model, scenario, accelerators) key
    share one prediction. Signed error % = (predicted − published) / published · 100.
    """
    from .summary import RowResult, ValidationReport

    start = time.perf_counter()
    data = str(rows) if isinstance(rows, (str, os.PathLike)) else "<memory>"
    rows = as_rows(rows)
    if rows and rows[0].file != "<memory>":
        data = rows[0].file
    front = frontier_mask(rows)
    keys = row_keys(rows, presets_dir)
    distinct = list(dict.fromkeys(k for k in keys if isinstance(k, PredictionKey)))
    cache: dict[PredictionKey, tuple[float | None, str]] = {}
    if predictor is not None:
        for n, key in enumerate(distinct, start=1):
            cache[key] = _call_predictor(predictor, key)
            if progress is not None:
                progress(n, len(distinct))
    else:
        runner = Runner(presets_dir, hardware_override)
        with runner:
            runner.start_pool(default_workers(len(distinct)) if workers is None else max(1, int(workers)))
            outs = runner.predict_many([(k,) for k in distinct], progress)
        cache = {k: (o.value, o.reason) for k, o in zip(distinct, outs)}
    results = []
    for r, key, is_front in zip(rows, keys, front):
        if isinstance(key, str):
            results.append(RowResult(r, None, None, key, is_front))
        else:
            value, reason = cache[key]
            results.append(RowResult(r, key.preset, value, reason, is_front))
    return ValidationReport(results, data=data, elapsed_s=time.perf_counter() - start, predictions=len(distinct))


__all__ = ["Runner", "Lock", "Outcome", "Values", "validate", "default_workers"]
