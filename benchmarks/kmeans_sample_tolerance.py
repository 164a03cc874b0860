"""How far k-means on a sample (``fit_kmeans(fit_rows=...)``) lands from k-means on all rows (issue 27).

The million-row benchmark's blobs are far apart (every method gives ARI 1), so this measures
the tolerance where clusters overlap: ``make_blobs``-like float32 data, n x d, 10 centres in
[-10, 10]^d and a spread ``std`` chosen so that k-means itself recovers the truth only partly.
For each spread and seed: ``KMeans(10, n_init=3)`` on all rows, ``fit_kmeans(fit_rows=m,
n_init=3)`` for several m, and ``MiniBatchKMeans(10, batch_size=4096, n_init=1)`` (the
previous choice); ARI of each against the all-rows labels and against the truth; one thread.

    python benchmarks/kmeans_sample_tolerance.py            # ~2 minutes on a quiet machine

Results in benchmarks/results/kmeans_sample_tolerance.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from million_points import blobs_float32  # noqa: E402

OUT = HERE.parent / "results" / "kmeans_sample_tolerance.json"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--stds", type=float, nargs="+", default=[6.0, 12.0, 16.0])
    p.add_argument("--fit-rows", type=int, nargs="+", default=[5000, 20000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.metrics import adjusted_rand_score as ari

    from pipeline.clustering import fit_kmeans
    from pipeline.threads import limit_threads

    rows = []
    with limit_threads(1):
        for std in args.stds:
            for seed in args.seeds:
                X, truth = blobs_float32(args.n, args.dim, 10, seed=seed)
                centres = np.random.default_rng(seed).uniform(-10, 10, size=(10, args.dim)).astype(np.float32)
                X -= centres[truth]
                X *= np.float32(std / 6.0)
                X += centres[truth]
                t = time.perf_counter()
                full = KMeans(10, n_init=3, random_state=seed).fit(X).labels_
                row = {"std": std, "seed": seed, "all_rows_s": time.perf_counter() - t,
                       "ari_all_rows_vs_truth": ari(truth, full)}
                for m in args.fit_rows:
                    t = time.perf_counter()
                    lab = fit_kmeans(X, 10, random_state=seed, fit_rows=m, n_init=3).labels
                    row[f"sample_{m}_s"] = time.perf_counter() - t
                    row[f"ari_sample_{m}_vs_all_rows"] = ari(full, lab)
                    row[f"ari_sample_{m}_vs_truth"] = ari(truth, lab)
                t = time.perf_counter()
                mb = MiniBatchKMeans(10, batch_size=4096, n_init=1, random_state=seed).fit(X).labels_
                row["minibatch_s"] = time.perf_counter() - t
                row["ari_minibatch_vs_all_rows"] = ari(full, mb)
                row["ari_minibatch_vs_truth"] = ari(truth, mb)
                rows.append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    summary = {f"min_ari_sample_{m}_vs_all_rows": min(r[f"ari_sample_{m}_vs_all_rows"] for r in rows)
               for m in args.fit_rows}
    summary["min_ari_minibatch_vs_all_rows"] = min(r["ari_minibatch_vs_all_rows"] for r in rows)
    print(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"n": args.n, "dim": args.dim, "rows": rows, "summary": summary,
                                    "load": os.getloadavg()}, indent=1))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
