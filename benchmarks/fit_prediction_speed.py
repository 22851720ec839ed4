"""Cost of calibrate's trial predictions: the pinned frontier predictions and the operating-point
groups that one residual evaluation of ``infersim calibrate --bundled-operating-points`` runs.

Pins each frontier row's choices and layout as the fit does (one full search at the shipped
values), then re-predicts every row and operating-point group under ``--trials`` sets of trial
efficiencies (each scaled by 1 % more than the last, so nothing is cached), in this process, and
prints the process time per prediction and a digest of every predicted value: two trees whose
digests agree predict the same numbers.

    python benchmarks/fit_prediction_speed.py [--trials 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from infersim.accuracy import fit as F
from infersim.accuracy.data import bundled_data, load_rows
from infersim.accuracy.runner import Runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    fit, _ = F.fit_rows(load_rows(bundled_data()), None)
    ops = F._op_rows(True, None)
    run = Runner()
    names = F.DEFAULT_PARAMETERS
    base = {fr.key.hardware: {n: float(getattr(run.base_hardware(fr.key.hardware).efficiency, n)) for n in names}
            for fr in fit}
    first = run.predict_many([(fr.key, F._vals(base[fr.key.hardware]), (), None) for fr in fit])
    locks = {fr.key: o.lock for fr, o in zip(fit, first)}
    op_first = run.predict_many([(o.key, F._vals(base.get(o.hardware, {})), (), F.OP_SEARCH) for o in ops])
    op_locks = {o.key: out.lock for o, out in zip(ops, op_first)}
    ops = [o for o in ops if op_locks.get(o.key) is not None and o.hardware in base]
    groups = F.op_groups(ops)
    digest = hashlib.sha256()
    t_rows = t_ops = 0.0
    n_rows = n_ops = 0
    for trial in range(args.trials):
        hw = {h: {n: v * (1 + 0.01 * (trial + 1)) if n != "step_overhead_ms" else v for n, v in d.items()}
              for h, d in base.items()}
        t = time.process_time()
        outs = run.predict_many([(fr.key, F._vals(hw[fr.key.hardware]), (), locks[fr.key]) for fr in fit])
        t_rows += time.process_time() - t
        n_rows += len(outs)
        tasks = [(k, F._vals(hw[k.hardware]), (), op_locks[k], F.slope_occupancies(ops, idx), osl, settings)
                 for (k, osl, settings), idx in groups.items()]
        t = time.process_time()
        res = run.predict_many(tasks)
        t_ops += time.process_time() - t
        n_ops += len(res)
        digest.update(json.dumps([o.value for o in outs] + [r.value for r in res]).encode())
    print(f"frontier rows {1e3 * t_rows / max(n_rows, 1):.2f} ms per prediction ({n_rows}), operating points "
          f"{1e3 * t_ops / max(n_ops, 1):.2f} ms per group ({n_ops}); digest {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
