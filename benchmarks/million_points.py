"""A million embeddings through the concept-tree steps: wall/CPU time and peak memory per step (issue 17).

Data: ``n`` x 512 float32 Gaussian blobs (10 clusters, std 6 around centres in [-10, 10]^512,
generated in chunks, never as float64). Steps, each timed on its own with the process's
resident set sampled every 5 ms:

1. ``MiniBatchKMeans(10)`` on the embeddings (float32 throughout), labels by ``predict``;
2. CAV fitting for 20 concepts (``CAVFitter``, logistic, 2 repeats, no significance test;
   each concept is "above a random hyperplane", labelled on 4,000 example rows, as concept
   example sets are: this step does not grow with n);
3. projection ``Z Cᵀ`` of all n embeddings (block-wise, no float64 copy of Z);
4. IMM, SpEx-Clique, MMDT and CART on the n x 20 concept coordinates with the k-means labels.

Each size runs in its own process, one after the other (never two at once); the growth
exponent of every step is the slope of log(time) against log(n) between the smallest and
the largest size.

    python benchmarks/million_points.py                          # 10k, 100k, 1M
    python benchmarks/million_points.py --sizes 10000 100000     # quick

Results are printed and written to benchmarks/results/million_points.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
OUT = HERE.parent / "results" / "million_points.json"
STEPS = ("kmeans", "cavs", "project", "imm", "spex_clique", "mmdt", "cart")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Highest resident set size seen while the block runs (sampled every 5 ms)."""

    def __enter__(self):
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def blobs_float32(n: int, d: int, k: int, seed: int = 0, chunk: int = 100_000):
    """make_blobs-like data built chunk by chunk in float32 (no float64 n x d array)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d)).astype(np.float32)
    labels = rng.integers(0, k, size=n)
    X = np.empty((n, d), dtype=np.float32)
    for i in range(0, n, chunk):
        part = rng.standard_normal(size=(min(chunk, n - i), d), dtype=np.float32)
        part *= 6.0
        part += centres[labels[i:i + chunk]]
        X[i:i + chunk] = part
    return X, labels


def worker(n: int, d: int, n_concepts: int, threads: int) -> dict:
    from sklearn.cluster import MiniBatchKMeans

    from pipeline.concepts.cav import CAVFitter
    from pipeline.concepts.projection import project
    from pipeline.trees import CART, IMM, MMDT, SpExClique
    from pipeline.threads import limit_threads

    rows: dict = {}
    base = rss_bytes()  # interpreter + libraries, before any data

    def step(name, fn):
        with PeakRSS() as mem:
            w, c = time.perf_counter(), time.process_time()
            out = fn()
            wall, cpu = time.perf_counter() - w, time.process_time() - c
        rows[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_GB": mem.peak / 1e9}
        print(f"  {name:<12} wall {wall:8.2f} s  cpu {cpu:8.2f} s  peak RSS {mem.peak / 1e9:6.2f} GB", flush=True)
        return out

    with limit_threads(threads):
        X, _ = step("data", lambda: blobs_float32(n, d, 10))
        print(f"  (interpreter and libraries: {base / 1e9:.2f} GB resident before the data)", flush=True)
        data_gb = X.nbytes / 1e9
        km = step("kmeans", lambda: MiniBatchKMeans(10, batch_size=4096, n_init=1, random_state=0).fit(X))
        y = km.labels_
        rng = np.random.default_rng(1)
        ex = rng.choice(n, size=min(n, 4000), replace=False)
        U = rng.standard_normal((d, n_concepts)).astype(np.float32)
        S = X[ex] @ U
        concept_labels = (S > np.median(S, axis=0)).astype(np.int8)
        cav = step("cavs", lambda: CAVFitter(n_repeats=2, cv=0, random_state=0).fit(X[ex], concept_labels))
        Z = step("project", lambda: project(X, cav.cavs_))
        # untimed warm-up: loads the compiled kernels from numba's cache (compiling them on a first
        # run), for uint16 row ids and, above 65,536 points, for int32 ones
        for size in (2000, 70_000):
            if size <= n:
                for est in (IMM(), SpExClique(), MMDT(), CART(n_leaves=10, random_state=0)):
                    est.fit(Z[:size], y[:size])
        step("imm", lambda: IMM().fit(Z, y))
        step("spex_clique", lambda: SpExClique().fit(Z, y))
        step("mmdt", lambda: MMDT().fit(Z, y))
        step("cart", lambda: CART(n_leaves=10, random_state=0).fit(Z, y))
    peak = max(r["peak_rss_GB"] for r in rows.values())
    return {"n": n, "d": d, "data_GB": data_gb, "steps": rows, "baseline_rss_GB": base / 1e9, "peak_rss_GB": peak,
            "peak_over_data": peak / data_gb, "peak_above_baseline_over_data": (peak - base / 1e9) / data_gb}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--concepts", type=int, default=20)
    p.add_argument("--threads", type=int, default=None, help="default: all cores")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from pipeline.threads import resolve_n_jobs

    threads = resolve_n_jobs(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args.dim, args.concepts, threads)))
        return
    results = []
    for n in args.sizes:
        print(f"n = {n:,} x {args.dim} float32 ({n * args.dim * 4 / 1e9:.2f} GB), {threads} thread(s); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        cmd = [sys.executable, str(HERE), "--worker", str(n), "--dim", str(args.dim), "--concepts",
               str(args.concepts), "--threads", str(threads)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode:
            raise SystemExit(f"size {n} failed (exit {proc.returncode})")
        lines = proc.stdout.rstrip().splitlines()
        print("\n".join(lines[:-1]), flush=True)
        res = json.loads(lines[-1])
        results.append(res)
        print(f"  peak RSS {res['peak_rss_GB']:.2f} GB = {res['peak_over_data']:.2f} x the data "
              f"({res['peak_above_baseline_over_data']:.2f} x above the {res['baseline_rss_GB']:.2f} GB of the "
              "interpreter and libraries)", flush=True)
    summary = {"runs": results, "threads": threads}
    if len(results) >= 2:
        a, b = results[0], results[-1]
        print(f"\nGrowth exponent in n ({a['n']:,} -> {b['n']:,}): slope of log t against log n")
        summary["exponent"] = {}
        for name in ("data",) + STEPS:
            row = {}
            for kind in ("wall_s", "cpu_s"):
                ta, tb = a["steps"][name][kind], b["steps"][name][kind]
                row[kind] = math.log(tb / ta) / math.log(b["n"] / a["n"]) if ta > 0 and tb > 0 else float("nan")
            summary["exponent"][name] = row
            print(f"  {name:<12} wall {a['steps'][name]['wall_s']:8.3f} s -> {b['steps'][name]['wall_s']:8.2f} s "
                  f"(exponent {row['wall_s']:5.2f});  cpu exponent {row['cpu_s']:5.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
