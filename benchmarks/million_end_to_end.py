"""A million embeddings end to end, before and after issue 27: every step after the embeddings exist.

Data: 1,000,000 x 512 float32 Gaussian blobs (:func:`million_points.blobs_float32`: 10
clusters, std 6 around centres in [-10, 10]^512; 2.05 GB), 20 concepts labelled on 4,000
example rows (each concept "above a random hyperplane"), as in ``million_points.py``.

Two worker processes run one after the other (never at once), each on ``--threads`` threads
(default 2) with ``OMP_WAIT_POLICY=PASSIVE``; each step is timed (wall and CPU) with the
process's resident set sampled every 5 ms:

========== ======================================================== ==========================================
step       before (main before issue 27, reproduced here)           after (this code)
========== ======================================================== ==========================================
clustering ``MiniBatchKMeans(10, batch_size=4096, n_init=1)``       ``fit_kmeans(fit_rows=20000, n_init=3)``:
                                                                    k-means on a 20k sample, one assignment pass
cavs       ``CAVFitter(n_repeats=2, cv=0)`` on one thread            the same fitter, concepts shared by threads
project    8,192-row float64 blocks, two n x d finiteness masks     :func:`pipeline.concepts.projection.project`:
                                                                    compiled float64 tiles, one read
imm        ``IMM()``                                                same (the kernels main has)
spex       ``SpExClique()``                                         same
mmdt       ``MMDT()``                                               same
cart       ``CART(builder="sklearn")`` (scikit-learn)               ``CART()`` (presorted builder)
========== ======================================================== ==========================================

The "after" worker also measures, outside the total:

* CART: the presorted builder and scikit-learn's on the same 1M x 20 concept coordinates in
  one process (ours: median of 3 after the timed fit; scikit-learn: one fit), their CPU
  ratio, and whether the two trees are identical (every node, threshold and leaf);
* projection speed in GB/s of latents read, beside a plain read of the same array (its sum
  on the same threads: the memory-bandwidth limit), and beside its float64 floor (its
  2 n d M FLOP at the per-thread peak of a square dgemm measured in the same process: the
  multiply-add limit, which at 20 concepts is the nearer one), medians of 3;
* clustering tolerance: the adjusted Rand index of the sampled k-means labels against
  ``KMeans(10, n_init=1)`` on all rows (and, in the parent, against the before column's
  MiniBatchKMeans labels).

The total is the sum of the seven steps' wall (and CPU) times; the peak resident set is
compared with the data (2.05 GB; the goal is <= 2x). The load average is recorded before and
after each worker: the machine is shared, ratios inside one process survive load better.

Command (about 3 minutes on a quiet 2-core machine; results in
``benchmarks/results/million_end_to_end.json``)::

    python benchmarks/million_end_to_end.py
    python benchmarks/million_end_to_end.py --n 200000 --skip-before   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from million_points import PeakRSS, blobs_float32, rss_bytes  # noqa: E402

OUT = HERE.parent / "results" / "million_end_to_end.json"
STEPS = ("clustering", "cavs", "project", "imm", "spex_clique", "mmdt", "cart")


def project_before(Z, cavs):
    """``pipeline.concepts.projection.project`` as main had it before issue 27, with the input
    checks it ran (two n x d finiteness masks for float32 latents)."""
    C = np.asarray(cavs, dtype=np.float64)
    if not np.all(np.isfinite(Z)) or (~np.isfinite(Z)).any():
        raise ValueError("non-finite latents")
    out = np.empty((Z.shape[0], C.shape[0]))
    step = max(1, (1 << 22) // max(Z.shape[1], 1))
    for i in range(0, Z.shape[0], step):
        out[i:i + step] = Z[i:i + step].astype(np.float64) @ C.T
    return out


def timed(fn):
    """(result, wall s, CPU s) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def worker(mode: str, n: int, d: int, n_concepts: int, threads: int, labels_out: str) -> dict:
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.metrics import adjusted_rand_score

    from pipeline.clustering import fit_kmeans
    from pipeline.concepts.cav import CAVFitter
    from pipeline.concepts.projection import project
    from pipeline.threads import limit_threads
    from pipeline.trees import CART, IMM, MMDT, SpExClique

    rows: dict = {}
    extra: dict = {"load_before": os.getloadavg()}
    base = rss_bytes()

    def step(name, fn):
        with PeakRSS() as mem:
            out, wall, cpu = timed(fn)
        rows[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_GB": mem.peak / 1e9}
        print(f"  [{mode}] {name:<11} wall {wall:7.2f} s  cpu {cpu:7.2f} s  peak RSS {mem.peak / 1e9:5.2f} GB  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        return out

    after = mode == "after"
    with limit_threads(threads):
        X, _ = blobs_float32(n, d, 10)
        data_gb = X.nbytes / 1e9
        rng = np.random.default_rng(1)
        ex = rng.choice(n, size=min(n, 4000), replace=False)
        U = rng.standard_normal((d, n_concepts)).astype(np.float32)
        S = X[ex] @ U
        concept_labels = (S > np.median(S, axis=0)).astype(np.int8)
        Xex = X[ex]
        # untimed warm-up: numba's cached kernels loaded (compiled on a first run) for small and large row ids
        warm = X[:70_000] @ U
        wy = (warm[:, 0] > 0).astype(int) + 2 * (warm[:, 1] > 0)
        for size in (2000, 70_000):
            for est in (IMM(), SpExClique(), MMDT(), CART(n_leaves=4, random_state=0, builder="presorted")):
                est.fit(warm[:size].astype(np.float64), wy[:size])
        del warm

        if after:
            y = step("clustering", lambda: fit_kmeans(X, 10, random_state=0, fit_rows=20000, n_init=3).labels)
            cav = step("cavs", lambda: CAVFitter(n_repeats=2, cv=0, random_state=0).fit(Xex, concept_labels))
            Z = step("project", lambda: project(X, cav.cavs_))
        else:
            y = step("clustering", lambda: MiniBatchKMeans(10, batch_size=4096, n_init=1, random_state=0)
                     .fit(X).labels_.astype(np.int64))

            def cavs_one_thread():
                with limit_threads(1):
                    return CAVFitter(n_repeats=2, cv=0, random_state=0).fit(Xex, concept_labels)

            cav = step("cavs", cavs_one_thread)
            Z = step("project", lambda: project_before(X, cav.cavs_))
        step("imm", lambda: IMM().fit(Z, y))
        step("spex_clique", lambda: SpExClique().fit(Z, y))
        step("mmdt", lambda: MMDT().fit(Z, y))
        cart = step("cart", lambda: CART(n_leaves=10, random_state=0, builder="auto" if after else "sklearn").fit(Z, y))
        np.save(labels_out, y)
        extra["load_after_steps"] = os.getloadavg()
        if after:
            extra.update(_checks(X, Z, y, cav, cart, threads))
            full, w, c = timed(lambda: KMeans(10, n_init=1, random_state=0).fit(X).labels_)
            extra["kmeans_all_rows"] = {"wall_s": w, "cpu_s": c, "ari_sampled_vs_all_rows": adjusted_rand_score(full, y)}
            print(f"  [after] clustering tolerance: ARI(sampled k-means, KMeans on all rows) = "
                  f"{extra['kmeans_all_rows']['ari_sampled_vs_all_rows']:.6f} (all rows took {w:.1f} s wall)", flush=True)
    total_wall = sum(rows[s]["wall_s"] for s in STEPS)
    total_cpu = sum(rows[s]["cpu_s"] for s in STEPS)
    peak = max(r["peak_rss_GB"] for r in rows.values())
    extra["load_end"] = os.getloadavg()
    return {"mode": mode, "n": n, "d": d, "threads": threads, "data_GB": data_gb, "steps": rows,
            "total_wall_s": total_wall, "total_cpu_s": total_cpu, "baseline_rss_GB": base / 1e9,
            "peak_rss_GB": peak, "peak_over_data": peak / data_gb, **extra}


def _checks(X, Z, y, cav, cart, threads) -> dict:
    """CART against scikit-learn in this process, projection GB/s against a plain read."""
    from pipeline.concepts.projection import project
    from pipeline.trees import CART

    out = {}
    ours = [timed(lambda: CART(n_leaves=10, random_state=0).fit(Z, y)) for _ in range(3)]
    ref, w_ref, c_ref = timed(lambda: CART(n_leaves=10, random_state=0, builder="sklearn").fit(Z, y))
    w_ours, c_ours = statistics.median(t[1] for t in ours), statistics.median(t[2] for t in ours)
    a, b = ref.estimator_.tree_.__getstate__(), cart.estimator_.tree_.__getstate__()
    fields = ("left_child", "right_child", "feature", "threshold", "impurity", "n_node_samples")
    same = (a["node_count"] == b["node_count"] and all(np.array_equal(a["nodes"][f], b["nodes"][f]) for f in fields)
            and np.array_equal(a["values"], b["values"]) and ref.tree_ == cart.tree_)
    out["cart"] = {"ours_wall_s": w_ours, "ours_cpu_s": c_ours, "sklearn_wall_s": w_ref, "sklearn_cpu_s": c_ref,
                   "cpu_ratio": c_ref / c_ours, "wall_ratio": w_ref / w_ours, "identical_tree": bool(same),
                   "same_predictions": bool(np.array_equal(ref.predict(Z), cart.predict(Z))),
                   "n_leaves": int(cart.n_leaves_), "load": os.getloadavg()}
    print(f"  [after] CART {Z.shape[0]:,} x {Z.shape[1]}: presorted {w_ours:.2f} s wall / {c_ours:.2f} s CPU, "
          f"scikit-learn {w_ref:.2f} / {c_ref:.2f} -> {c_ref / c_ours:.1f}x CPU, {w_ref / w_ours:.1f}x wall; "
          f"identical tree: {same}", flush=True)
    proj = [timed(lambda: project(X, cav.cavs_)) for _ in range(3)]
    read = [timed(lambda: parallel_sum(X, threads)) for _ in range(3)]
    w_p, w_r = statistics.median(t[1] for t in proj), statistics.median(t[1] for t in read)
    gb = X.nbytes / 1e9
    flops = 2.0 * X.shape[0] * X.shape[1] * cav.cavs_.shape[0]
    peak = dgemm_peak_gflops()
    floor = flops / (peak * 1e9 * threads)
    out["project"] = {"wall_s": w_p, "cpu_s": statistics.median(t[2] for t in proj), "GB_per_s": gb / w_p,
                      "read_wall_s": w_r, "read_GB_per_s": gb / w_r, "share_of_read_speed": w_r / w_p,
                      "gflop": flops / 1e9, "dgemm_peak_gflops_per_thread": peak, "float64_floor_s": floor,
                      "share_of_float64_peak": floor / w_p, "threads": threads, "load": os.getloadavg()}
    print(f"  [after] projection {gb / w_p:.1f} GB/s ({w_p:.3f} s); plain read ({threads} threads) {gb / w_r:.1f} GB/s "
          f"({w_r:.3f} s); float64 floor {floor:.3f} s ({flops / 1e9:.1f} GFLOP at the {peak:.0f} GFLOP/s per thread "
          f"of a square dgemm) -> {floor / w_p:.0%} of float64 peak", flush=True)
    return out


def parallel_sum(X, threads: int) -> float:
    """One plain read of X on ``threads`` threads (numpy releases the GIL): the memory-bandwidth limit."""
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, X.shape[0], threads + 1).astype(int)
    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(lambda i: float(X[bounds[i]:bounds[i + 1]].sum()), range(threads)))


def dgemm_peak_gflops(size: int = 1500) -> float:
    """float64 multiply-add peak of one thread: a square dgemm (BLAS at its best), median of 3."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    A, B = rng.random((size, size)), rng.random((size, size))
    with threadpool_limits(1):
        A @ B
        times = [timed(lambda: A @ B)[1] for _ in range(3)]
    return 2.0 * size ** 3 / statistics.median(times) / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--concepts", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-before", action="store_true", help="only the after column")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--worker", choices=("before", "after"), help=argparse.SUPPRESS)
    p.add_argument("--labels-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.dim, args.concepts, args.threads, args.labels_out)))
        return
    from pipeline.threads import openmp_environment

    env = {**os.environ, **openmp_environment(args.threads)}
    results, labels = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("after",) if args.skip_before else ("before", "after"):
            labels[mode] = str(Path(tmp) / f"{mode}.npy")
            print(f"{mode}: n = {args.n:,} x {args.dim} float32, {args.threads} threads; load {os.getloadavg()}",
                  flush=True)
            cmd = [sys.executable, str(HERE), "--worker", mode, "--n", str(args.n), "--dim", str(args.dim),
                   "--concepts", str(args.concepts), "--threads", str(args.threads), "--labels-out", labels[mode]]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
            if proc.returncode:
                raise SystemExit(f"{mode} worker failed (exit {proc.returncode})")
            lines = proc.stdout.rstrip().splitlines()
            print("\n".join(lines[:-1]), flush=True)
            results[mode] = json.loads(lines[-1])
            r = results[mode]
            print(f"  [{mode}] total wall {r['total_wall_s']:.2f} s, CPU {r['total_cpu_s']:.2f} s; peak RSS "
                  f"{r['peak_rss_GB']:.2f} GB = {r['peak_over_data']:.2f} x the data", flush=True)
        if "before" in results:
            from sklearn.metrics import adjusted_rand_score

            ari = adjusted_rand_score(np.load(labels["before"]), np.load(labels["after"]))
            results["after"]["ari_sampled_vs_minibatch"] = ari
            print(f"\nARI(sampled k-means, MiniBatchKMeans of the before column) = {ari:.6f}")
    if "before" in results:
        b, a = results["before"], results["after"]
        print(f"\n{'step':<12}{'before wall':>12}{'after wall':>12}{'before CPU':>12}{'after CPU':>12}")
        for s in STEPS + ("total",):
            get = (lambda r, k: r[f"total_{k}_s"]) if s == "total" else (lambda r, k: r["steps"][s][f"{k}_s"])
            print(f"{s:<12}{get(b, 'wall'):12.2f}{get(a, 'wall'):12.2f}{get(b, 'cpu'):12.2f}{get(a, 'cpu'):12.2f}")
        print(f"{'peak RSS/data':<12}{b['peak_over_data']:12.2f}{a['peak_over_data']:12.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": results, "command": " ".join(sys.argv)}, indent=1))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
