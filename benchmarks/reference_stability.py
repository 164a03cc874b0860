"""The GMM reference clustering over seeds, before and after the robust choice (issue 36, item 3).

    .venv/bin/python benchmarks/reference_stability.py FEATURES.npz [--seeds 0 1 ... 9] [--n-init 3]
        [--out NAME]

FEATURES.npz holds ``Z`` (latents, n x d) and ``y`` (classes), e.g. the EfficientNet-Lite0
features (``blocks.6``, 320-d) of the 18,000 Fashion-MNIST training images of Shirt, Sneaker and
Ankle boot (classes 6, 7, 9) that the pipeline's cache holds. For every seed the ``n_init``
restarts of the pipeline's GMM (``clustering=gmm``: full covariances) are fitted once
(:func:`pipeline.clustering.gmm_restarts`) and both rules choose among the same restarts:

* before: the likeliest restart (scikit-learn's ``n_init`` rule, the pipeline's until issue 36);
* after: the likeliest restart without a degenerate component
  (:func:`pipeline.clustering.choose_restart`), the pipeline's default now.

Per seed: each rule's ARI against the classes, the restarts' ARIs and log-likelihood bounds,
which were degenerate, and the stability figure every run now reports (mean ARI between the
restarts' labelings). Printed and saved to benchmarks/results/<out>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

from pipeline.clustering import STABILITY_THRESHOLD, choose_restart, gmm_restarts, restart_stability

RESULTS = Path(__file__).parent / "results"


def one_seed(Z, y, k: int, n_init: int, seed: int) -> dict:
    cpu = time.process_time()
    fits = gmm_restarts(Z, k, {"covariance_type": "full", "n_init": n_init}, seed)
    labels = [g.predict(Z) for g in fits]
    before, _ = choose_restart(fits, len(Z), skip_degenerate=False)
    after, degenerate = choose_restart(fits, len(Z), skip_degenerate=True)
    aris = [float(adjusted_rand_score(y, lab)) for lab in labels]
    return {"seed": seed, "before_ari": aris[before], "after_ari": aris[after], "before_restart": before,
            "after_restart": after, "stability": restart_stability(labels), "restart_ari": aris,
            "log_likelihood": [float(g.lower_bound_) for g in fits], "degenerate": degenerate,
            "smallest_component": [int(round(min(g.weights_) * len(Z))) for g in fits],
            "cpu_s": time.process_time() - cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("features")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--n-init", type=int, default=3, help="restarts per seed (the pipeline's clustering.params.n_init)")
    ap.add_argument("--out", default="reference_stability")
    args = ap.parse_args()
    data = np.load(args.features)
    Z, y = np.asarray(data["Z"], dtype=np.float64), np.asarray(data["y"])
    k = int(np.unique(y).size)
    rows = []
    print(f"{args.features}: {Z.shape[0]} x {Z.shape[1]}, K={k}, {args.n_init} restarts per seed", flush=True)
    for seed in args.seeds:
        row = one_seed(Z, y, k, args.n_init, seed)
        rows.append(row)
        print(f"seed {seed}: before {row['before_ari']:.3f}  after {row['after_ari']:.3f}  stability "
              f"{row['stability']:.3f}  restarts {np.round(row['restart_ari'], 3).tolist()}  degenerate "
              f"{row['degenerate']}  smallest {row['smallest_component']}  ({row['cpu_s']:.0f} s CPU, load "
              f"{os.getloadavg()[0]:.1f})", flush=True)
    summary = {}
    for rule in ("before", "after"):
        a = np.array([r[f"{rule}_ari"] for r in rows])
        summary[rule] = {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
                         "share_below_0.6": float((a < 0.6).mean())}
    st = np.array([r["stability"] for r in rows])
    summary["stability"] = {"median": float(np.median(st)), "min": float(st.min()), "max": float(st.max()),
                            "share_unstable": float((st < STABILITY_THRESHOLD).mean()), "threshold": STABILITY_THRESHOLD}
    print(json.dumps(summary, indent=1))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.out}.json"
    path.write_text(json.dumps({"command": " ".join(sys.argv), "features": args.features, "n": int(Z.shape[0]),
                                "d": int(Z.shape[1]), "k": k, "n_init": args.n_init, "summary": summary, "rows": rows},
                               indent=1))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
