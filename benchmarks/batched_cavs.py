"""Batched CAV fits (issue 48, item 5): pipeline.concepts.batched_logistic against a loop of scikit-learn fits.

Sections (``--sections``, default all):

- ``products``: why tiles: the throughput (GFLOP/s, one thread) of one tile's matrix product
  (rows x d times d x problems, BLAS GEMM) against one matrix-vector product per problem on its
  own gathered rows (what a loop of fits, or a compiled loop over problems, does), in the shapes
  of the sections below.
- ``shapes``: B logistic regressions of n rows each, in the pipeline's shapes (d=10, n=1,600,
  B=200: VaDE latents; d=384, n=600, B=100: SBERT; d=512, n=2,000, B=140: the out-of-core
  benchmark's 20 concepts x 7 fits; d=1280, n=1,000, B=60: EfficientNet). Problems come in
  groups of 7 that share a concept's example pool (positives and negatives of 1.25 n rows, 3 of
  the 7 with permuted labels, like CAVFitter's random-split CAVs), standardised as CAVFitter's
  ``standardize="auto"`` does. Timed: the batch (``tol=1e-10``; tiles from the example sets, and
  the default greedy tiles), the loop of scikit-learn fits CAVFitter runs today
  (``LogisticRegression(C=1, max_iter=500)``, lbfgs, tol 1e-4, on the standardised rows) and the
  same loop at ``tol=1e-10``; one thread, and two (the batch: its tiles shared among two
  threads; the loop: two Python threads over the problems; BLAS on one thread each, as
  CAVFitter runs its fits). Accuracy: the batch's coefficients against scikit-learn's newton-cholesky at
  tol 1e-12 (largest difference over the largest coefficient) and held-out accuracy.
- ``cav``: the concept set of benchmarks/out_of_core.py (20 concepts x 300 example embeddings
  in 512 dimensions, 600 shared negatives). Today: ``CAVFitter.fit`` + ``calibration`` (5
  repeats x (1 fit + 3 folds + 3 random-split folds) + 3 calibration folds per concept: 760
  fits). Batched: the same 760 fits in one call (folds standardised with their draw's
  statistics, started from their draw's fit), the held-out scores and the CAVs; their CAVs
  against a CAVFitter whose fitter is scikit-learn at tol 1e-12 (the same fits, exact) and
  against today's. The draws' fits at ``tol=1e-10``, the folds (held-out accuracy only) at
  ``tol=1e-6`` (and, for comparison, at 1e-10 too). Then the fits issue 48's TCAV test adds:
  20 random example sets of 300 rows (drawn like the data), each concept against each (400 CAVs)
  and 20 random-vs-random CAVs, batched and as a loop of today's fits.

Medians of ``--repeats`` (default 5) rounds after one warm-up, each round running every
contender once in a rotating order (``paired``), and the median of the per-round ratios; the
load average is recorded before and after each section (a 2-core machine shared with other
work: the ratios are the robust numbers). Results: benchmarks/results/batched_cavs.json.

    python benchmarks/batched_cavs.py
    python benchmarks/batched_cavs.py --sections cav --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from pipeline.concepts.batched_logistic import fit_logistic_batch, standardization_scales
from pipeline.concepts.cav import CAVFitter, _float32_columns, standardize_shrinkage
from pipeline.concepts.fitters import LogisticFitter
from pipeline.threads import blas_threads, limit_threads

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "batched_cavs.json"
SHAPES = [(10, 1600, 200), (384, 600, 100), (512, 2000, 140), (1280, 1000, 60)]
RANDOM_SETS = 20
FOLD_TOL = 1e-6  # the folds only score held-out accuracy: coefficients within ~1e-5 are plenty


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def paired(fns: dict, repeats: int, base: str, against: str) -> dict:
    """Median seconds of each of ``fns`` over ``repeats`` rounds (each round runs every function
    once, in a rotating order, so a change in the machine's load hits all alike) and the median
    over rounds of the ratio ``base / against``."""
    for fn in fns.values():
        fn()  # warm-up: numba's cache, BLAS pools, page faults
    times = {k: [] for k in fns}
    keys = list(fns)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            t = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t)
    out = {f"{k}_s": round(float(np.median(v)), 4) for k, v in times.items()}
    out[f"{base}_over_{against}"] = round(float(np.median(np.array(times[base]) / np.array(times[against]))), 2)
    return out


# --------------------------------------------------------------------------- products


def product_section(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    out = {"load_before": load(), "rows": []}
    for rows, used, d, problems in [(1600, 1600, 10, 200), (600, 600, 384, 100), (2500, 2000, 512, 7),
                                    (600, 240, 512, 128), (300, 300, 512, 20), (1000, 1000, 1280, 60)]:
        X, W = rng.standard_normal((rows, d)), rng.standard_normal((problems, d))
        own = [X[rng.choice(rows, used, replace=False)] for _ in range(problems)]
        with blas_threads(1):
            t = paired({"tile": lambda: X @ W.T, "loop": lambda: [own[b] @ W[b] for b in range(problems)]},
                       10 * repeats, "loop", "tile")
        out["rows"].append({"tile_rows": rows, "rows_per_problem": used, "d": d, "problems": problems,
                            "tile_gemm_gflops": round(2 * rows * d * problems / t["tile_s"] / 1e9, 1),
                            "per_problem_gemv_gflops": round(2 * used * d * problems / t["loop_s"] / 1e9, 1),
                            "useful_speedup_of_tile": t["loop_over_tile"]})
        print(json.dumps(out["rows"][-1]), flush=True)
    out["load_after"] = load()
    return out


# --------------------------------------------------------------------------- shapes


def grouped_problems(d: int, n: int, B: int, seed: int = 0):
    """B problems of n rows in groups of 7 sharing one concept's pools (positives, negatives of
    0.625 n rows each); the last 3 of each group have permuted labels. Returns Z, rows, labels,
    the block (pool) of every row, and a held-out draw per group."""
    rng = np.random.default_rng(seed)
    pool = int(1.25 * n) // 2
    parts, rows, labels, tests = [], [], [], []
    for g in range(B // 7):
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        spread = rng.uniform(0.5, 2, d)
        pos = rng.standard_normal((pool + 200, d)) * spread + 1.5 * u
        neg = rng.standard_normal((pool + 200, d)) * spread
        parts += [pos[:pool], neg[:pool]]
        tests.append((np.r_[pos[pool:], neg[pool:]], np.r_[np.ones(200), np.zeros(200)]))
        for k in range(7):
            r = np.r_[rng.choice(pool, n // 2, replace=False) + 2 * g * pool,
                      rng.choice(pool, n // 2, replace=False) + (2 * g + 1) * pool]
            y = np.r_[np.ones(n // 2), np.zeros(n // 2)]
            rows.append(r)
            labels.append(rng.permutation(y) if k >= 4 else y)
    Z = np.concatenate(parts)
    return Z, rows, labels, np.arange(len(Z)) // pool, tests


def sklearn_loop(Z, rows, labels, tol: float, threads: int):
    """CAVFitter's fits today: each problem standardised as _direction does, then LogisticRegression."""

    def one(b):
        X = Z[rows[b]]
        scale = standardization_scales(X, [np.arange(len(X))], "auto")[0]
        w = LogisticRegression(C=1.0, max_iter=500 if tol == 1e-4 else 10_000, tol=tol).fit(
            (X - X.mean(axis=0)) / scale, labels[b]).coef_[0]
        return w / scale

    with blas_threads(1):
        if threads == 1:
            return [one(b) for b in range(len(rows))]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, range(len(rows))))


def shape_section(repeats: int) -> dict:
    out = {"load_before": load(), "rows": []}
    for d, n, B in SHAPES:
        Z, rows, labels, blocks, tests = grouped_problems(d, n, B)
        row = {"d": d, "rows_per_problem": n, "problems": B, "shared_rows": int(len(Z))}
        for threads in (1, 2):
            with limit_threads(threads):
                row[f"threads_{threads}"] = paired({
                    "batched": lambda: fit_logistic_batch(Z, rows, labels, standardize="auto", blocks=blocks),
                    "batched_greedy_tiles": lambda: fit_logistic_batch(Z, rows, labels, standardize="auto"),
                    "sklearn_loop_today": lambda: sklearn_loop(Z, rows, labels, 1e-4, threads),
                    "sklearn_loop_tol1e-10": lambda: sklearn_loop(Z, rows, labels, 1e-10, threads),
                }, repeats, "sklearn_loop_today", "batched")
            print(json.dumps({"d": d, f"threads_{threads}": row[f"threads_{threads}"]}), flush=True)
        res = fit_logistic_batch(Z, rows, labels, standardize="auto", blocks=blocks)
        row["solver"], row["iterations_median"] = res.solver, float(np.median(res.n_iter))
        row["converged"] = bool(res.converged.all())
        scales = standardization_scales(Z, rows, "auto")
        coef_err, acc_diff = [], []
        for b in (0, 1, 4, len(rows) - 1):  # true and permuted labels
            X = Z[rows[b]]
            m = X.mean(axis=0)
            lr = LogisticRegression(solver="newton-cholesky", tol=1e-12, max_iter=1000).fit((X - m) / scales[b],
                                                                                           labels[b])
            ref = lr.coef_[0] / scales[b]
            ref_b = lr.intercept_[0] - ref @ m
            coef_err.append(np.abs(res.coef[b] - ref).max() / np.abs(ref).max())
            Xt, yt = tests[b // 7]
            acc_diff.append(abs(np.mean((Xt @ res.coef[b] + res.intercept[b] > 0) == yt)
                                - np.mean((Xt @ ref + ref_b > 0) == yt)))
        row["max_rel_coef_diff_vs_sklearn_newton_cholesky"] = float(max(coef_err))
        row["max_heldout_accuracy_diff"] = float(max(acc_diff))
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
    out["load_after"] = load()
    return out


# --------------------------------------------------------------------------- cav


def concept_set(tmp: Path):
    """benchmarks/out_of_core.py's 20 concepts (300 embeddings each) and 600 negatives, as
    concepts=examples reads them (positives 1, negatives 0, other concepts' rows unlabelled)."""
    sys.path.insert(0, str(HERE))
    from out_of_core import CLUSTERS, DIM, make_concepts

    from pipeline.app.concept_sets.examples import read_concept_examples

    ex = read_concept_examples(make_concepts(tmp / "c.npy"), None)  # as concepts=examples reads it
    Z, labels, names = ex.inputs, ex.labels, list(ex.names)
    # one block per example set: each concept's positives, then the shared negatives
    blocks = np.where(np.isnan(labels).all(axis=1) | (labels == 0).all(axis=1), len(names),
                      np.nanargmax(np.nan_to_num(labels, nan=-1), axis=1))
    # TCAV's random example sets: rows drawn like the data (a random cluster centre + noise)
    centres = np.random.default_rng(0).uniform(-10, 10, size=(CLUSTERS, DIM)).astype(np.float32)
    rng = np.random.default_rng(7)
    randoms = (centres[rng.integers(0, CLUSTERS, (RANDOM_SETS, 300))]
               + 6 * rng.standard_normal((RANDOM_SETS, 300, DIM))).astype(np.float32)
    return Z, labels, names, blocks, randoms


class TightLogistic(LogisticFitter):
    """CAVFitter's fitter at scikit-learn's tightest: the exact fits the batch must equal."""

    def direction(self, Z, y, random_state):
        return LogisticRegression(C=self.C, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(Z, y).coef_[0]


def batched_cav_fits(Z, labels, blocks, random_state=0, n_folds=3, fold_tol=1e-10):
    """CAVFitter.fit's and calibration's logistic fits, drawn as they draw them, in one batch;
    returns (unit CAVs, held-out scores (concepts, repeats), random-split scores, the batch).
    ``fold_tol``: the tolerance of the folds (they only give held-out accuracies)."""
    cf, fitter = CAVFitter(random_state=random_state), LogisticFitter()
    Zf = _float32_columns(Z)[0].astype(np.float64)
    d = Z.shape[1]
    rng = np.random.default_rng(random_state)
    rows, labs, scale_from, warm_from, setting, plan, tol = [], [], [], [], [], [], []

    def add(r, y, sf=-1, wf=-1, t=1e-10):
        rows.append(r)
        labs.append(y)
        scale_from.append(sf)
        warm_from.append(wf)
        tol.append(t)
        setting.append(standardize_shrinkage("auto", len(r), d))
        return len(rows) - 1

    for m in range(labels.shape[1]):
        for idx, seed, permuted in cf._plan(fitter, labels[:, m], rng):
            ys = labels[idx, m]
            full = add(idx, ys)
            folds = {}
            for kind, lab in (("true", ys), ("random", permuted)):
                split = StratifiedKFold(cf.cv, shuffle=True, random_state=seed).split(idx, lab)
                folds[kind] = [(add(idx[tr], lab[tr], full, full if kind == "true" else -1, fold_tol),
                                idx[tr], idx[te], lab[tr], lab[te]) for tr, te in split]
            plan.append((m, full, folds))
    rng = np.random.default_rng(random_state)
    for m in range(labels.shape[1]):  # calibration's draws, in its order
        y = labels[:, m]
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        k = cf.max_per_class
        idx = np.concatenate([rng.choice(pos, min(k, pos.size), replace=False),
                              rng.choice(neg, min(k, neg.size), replace=False)])
        seed = int(rng.integers(2**31 - 1))
        for tr, te in StratifiedKFold(min(n_folds, pos.size, neg.size, k), shuffle=True,
                                      random_state=seed).split(idx, y[idx]):
            add(idx[tr], y[idx][tr], t=fold_tol)
    res = fit_logistic_batch(Zf, rows, labs, standardize=setting, scale_from=scale_from, warm_from=warm_from,
                             blocks=blocks, tol=tol)
    M, R = labels.shape[1], cf.n_repeats
    dirs = np.zeros((M, R, d))
    scores, random_scores = np.zeros((M, R)), np.zeros((M, R))
    for i, (m, full, folds) in enumerate(plan):
        w = res.coef[full]
        dirs[m, i % R] = w / np.linalg.norm(w)
        for kind, out in (("true", scores), ("random", random_scores)):
            out[m, i % R] = np.mean([fitter.score(res.coef[b], Zf[tr], ytr, Zf[te], yte)
                                     for b, tr, te, ytr, yte in folds[kind]])
    mean = dirs.mean(axis=1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True), scores, random_scores, res


def tcav_problems(Z, labels, randoms):
    """Each concept's positives against each random set, and random set i against i+1."""
    N, S, n = len(Z), len(randoms), randoms.shape[1]
    Zall = np.concatenate([Z, randoms.reshape(-1, Z.shape[1])])
    set_rows = [N + np.arange(i * n, (i + 1) * n) for i in range(S)]
    rows, labs = [], []
    for m in range(labels.shape[1]):
        pos = np.flatnonzero(labels[:, m] == 1)
        for r in set_rows:
            rows.append(np.r_[pos, r])
            labs.append(np.r_[np.ones(pos.size), np.zeros(n)])
    for i in range(S):
        rows.append(np.r_[set_rows[i], set_rows[(i + 1) % S]])
        labs.append(np.r_[np.ones(n), np.zeros(n)])
    return Zall, rows, labs


def cav_section(repeats: int) -> dict:
    out = {"load_before": load()}
    with tempfile.TemporaryDirectory() as tmp:
        Z, labels, names, blocks, randoms = concept_set(Path(tmp))
    out["concepts"], out["dim"], out["examples"] = len(names), int(Z.shape[1]), int(len(Z))
    Zall, trows, tlabs = tcav_problems(Z, labels, randoms)
    tblocks = np.r_[blocks, blocks.max() + 1 + np.repeat(np.arange(RANDOM_SETS), randoms.shape[1])]
    def today():
        f = CAVFitter(random_state=0).fit(Z, labels, names)
        f.calibration(Z, labels, names)

    for threads in (1, 2):
        with limit_threads(threads):
            row = paired({"today_fit_plus_calibration": today,
                          "batched_same_fits": lambda: batched_cav_fits(Z, labels, blocks, fold_tol=FOLD_TOL),
                          "batched_same_fits_folds_tol1e-10": lambda: batched_cav_fits(Z, labels, blocks),
                          "tcav_fits_batched": lambda: fit_logistic_batch(Zall, trows, tlabs, standardize="auto",
                                                                          blocks=tblocks),
                          "tcav_fits_sklearn_loop": lambda: sklearn_loop(Zall, trows, tlabs, 1e-4, threads)},
                         repeats, "today_fit_plus_calibration", "batched_same_fits")
        row["batched_all_s"] = round(row["batched_same_fits_s"] + row["tcav_fits_batched_s"], 4)
        row["today_plus_tcav_as_loop_s"] = round(row["today_fit_plus_calibration_s"]
                                                 + row["tcav_fits_sklearn_loop_s"], 4)
        out[f"threads_{threads}"] = row
        print(json.dumps({f"threads_{threads}": row}), flush=True)
    cavs, scores, random_scores, res = batched_cav_fits(Z, labels, blocks, fold_tol=FOLD_TOL)
    out["fits"], out["tcav_fits"] = int(len(res.coef)), len(trows)
    out["solver"], out["iterations_median"], out["converged"] = res.solver, float(np.median(res.n_iter)), \
        bool(res.converged.all())
    exact = CAVFitter(random_state=0, fitter=TightLogistic()).fit(Z, labels, names)
    today = CAVFitter(random_state=0).fit(Z, labels, names)
    out["max_cav_diff_vs_exact_sklearn"] = float(np.abs(cavs - exact.cavs_).max())
    out["max_heldout_score_diff_vs_exact_sklearn"] = float(np.nanmax(np.abs(scores - exact.scores_)))
    out["max_random_score_diff_vs_exact_sklearn"] = float(np.nanmax(np.abs(random_scores - exact.random_scores_)))
    out["max_cav_angle_deg_vs_today"] = float(np.degrees(np.arccos(np.clip((cavs * today.cavs_).sum(1), -1, 1))).max())
    out["max_heldout_score_diff_vs_today"] = float(np.nanmax(np.abs(scores - today.scores_)))
    out["load_after"] = load()
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("threads")}), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", nargs="+", default=["products", "shapes", "cav"],
                    choices=["products", "shapes", "cav"])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results["machine"] = {"cpus": os.cpu_count(), "repeats": args.repeats,
                          "note": "2 cores shared with other developers' work: see the load averages"}
    if "products" in args.sections:
        results["products"] = product_section(args.repeats)
    if "shapes" in args.sections:
        results["shapes"] = shape_section(args.repeats)
    if "cav" in args.sections:
        results["cav"] = cav_section(args.repeats)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
