"""Reproduce the first row of Table 1 (Fleissner et al.): MMDT vs CART on a 5-component 2-D GMM.

    .venv/bin/python benchmarks/mmdt_table1.py [--n 5000000] [--seed 0]

Data as in the paper's appendix: K = 5 means drawn uniformly from a ball of radius 50 with
pairwise distance >= 20, random positive-definite covariances, n samples (equal mixing
weights). Base clustering: sklearn GaussianMixture (fitted on a 200k subsample to keep the
run short, then used to label all n points). Reported (medians of repeats):

* MMDT tree construction from the fitted mixture (data-independent), and, for
  n = 1e4 … 5e6, separately the time to estimate means/σ from the base labels and the pure
  tree construction from those estimates;
* MMDT predict on all n samples;
* CART (DecisionTreeClassifier, max_leaf_nodes = K) fit + predict on the same labels;
* ARI of the base clustering, MMDT and CART against the ground truth.

Results are printed and saved to benchmarks/results/mmdt_table1.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
from sklearn.mixture import GaussianMixture
from tqdm import tqdm

from pipeline.metrics import ari, explainability_to_noise_ratio
from pipeline.trees import CART, MMDT

RESULTS = Path(__file__).parent / "results"


def random_gmm(rng, K=5, d=2, radius=50.0, min_dist=20.0):
    """Means uniform in a ball of ``radius`` with pairwise distance >= ``min_dist``; random SPD covariances."""
    means = []
    while len(means) < K:
        direction = rng.normal(size=d)
        point = direction / np.linalg.norm(direction) * radius * rng.uniform() ** (1 / d)
        if all(np.linalg.norm(point - m) >= min_dist for m in means):
            means.append(point)
    covs = []
    for _ in range(K):
        A = rng.normal(size=(d, d))
        covs.append(rng.uniform(3.0, 7.0) ** 2 * (A @ A.T / d + 0.2 * np.eye(d)))
    return np.array(means), np.array(covs)


def sample_gmm(rng, means, covs, n):
    counts = rng.multinomial(n, np.full(len(means), 1 / len(means)))
    X = np.vstack([rng.multivariate_normal(m, c, size=k) for m, c, k in zip(means, covs, counts)])
    y = np.repeat(np.arange(len(means)), counts)
    perm = rng.permutation(n)
    return X[perm], y[perm]


def timed(fn, repeats):
    """Median wall time of ``repeats`` calls and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cart-repeats-full", type=int, default=2, help="CART repeats at the largest n")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    K = 5
    means, covs = random_gmm(rng, K=K)
    X, truth = sample_gmm(rng, means, covs, args.n)
    sigma_true = np.sqrt(np.einsum("kjj->kj", covs).max(axis=0))
    q_true = explainability_to_noise_ratio(means, sigma_true)
    logging.info("data: n=%d, d=2, K=%d, population q=%.3f", args.n, K, q_true)

    sub = rng.choice(args.n, size=min(200_000, args.n), replace=False)
    t_gmm, gmm = timed(lambda: GaussianMixture(K, covariance_type="full", random_state=args.seed).fit(X[sub]), 1)
    t_base_pred, base = timed(lambda: gmm.predict(X), 1)
    res = {"n": args.n, "K": K, "d": 2, "seed": args.seed, "q_population": q_true,
           "gmm_fit_200k_s": t_gmm, "gmm_predict_all_s": t_base_pred}

    # MMDT straight from the fitted mixture: no samples touched.
    res["mmdt_construct_from_gmm_s"], m_gmm = timed(lambda: MMDT(random_state=0).fit_gaussian_mixture(gmm), 51)
    res["mmdt_predict_all_s"], pred_gmm = timed(lambda: m_gmm.predict(X), 5)

    sizes = [n for n in (10_000, 100_000, 1_000_000, 5_000_000) if n < args.n] + [args.n]
    rows = []
    for n in tqdm(sizes, desc="sizes"):
        Xn, bn = X[:n], base[:n]
        big = n == args.n
        t_fit, m = timed(lambda: MMDT(random_state=0).fit(Xn, bn), 3 if big else 7)
        t_tree, _ = timed(lambda: MMDT(random_state=0).fit_mixture(m.means_, m.sigma_), 51)
        t_pred, pred = timed(lambda: m.predict(Xn), 3 if big else 7)
        cart_reps = args.cart_repeats_full if big else (2 if n >= 1_000_000 else 5)
        t_cart_fit, cart = timed(lambda: CART(random_state=0).fit(Xn, bn), cart_reps)
        t_cart_pred, cart_pred = timed(lambda: cart.predict(Xn), 3)
        rows.append({
            "n": n,
            "mmdt_fit_from_labels_s": t_fit,
            "mmdt_tree_construction_s": t_tree,
            "mmdt_estimation_s": max(t_fit - t_tree, 0.0),
            "mmdt_predict_s": t_pred,
            "cart_fit_s": t_cart_fit,
            "cart_predict_s": t_cart_pred,
            "cart_repeats": cart_reps,
            "ratio_cart_fit_over_mmdt_construction": t_cart_fit / t_tree,
            "ratio_cart_total_over_mmdt_total": (t_cart_fit + t_cart_pred) / (t_fit + t_pred),
            "ari_mmdt_labels": ari(truth[:n], pred),
            "ari_cart": ari(truth[:n], cart_pred),
        })
    res["sizes"] = rows
    full = rows[-1]
    res["ari_base_gmm"] = ari(truth, base)
    res["ari_mmdt_from_gmm"] = ari(truth, pred_gmm)
    res["ari_mmdt_from_labels"] = full["ari_mmdt_labels"]
    res["ari_cart"] = full["ari_cart"]
    res["mmdt_tree"] = m_gmm.tree_.to_text()

    print(f"\nTable 1, row 1 (n={args.n:,}, d=2, K={K}, base = GMM; times are medians, seconds)")
    print(f"population q = {q_true:.2f}")
    print(f"ARI vs truth: base GMM {res['ari_base_gmm']:.3f} | MMDT (from GMM) {res['ari_mmdt_from_gmm']:.3f} | "
          f"MMDT (from labels) {res['ari_mmdt_from_labels']:.3f} | CART {res['ari_cart']:.3f}")
    print(f"MMDT construction from fitted GMM: {res['mmdt_construct_from_gmm_s'] * 1e3:.3f} ms; "
          f"MMDT predict on all {args.n:,}: {res['mmdt_predict_all_s']:.3f} s")
    header = ("n", "estimate(s)", "tree(ms)", "mmdt pred(s)", "cart fit(s)", "cart pred(s)",
              "fit/tree", "total ratio", "ARI mmdt", "ARI cart")
    print("{:>9} {:>11} {:>9} {:>12} {:>11} {:>12} {:>9} {:>11} {:>8} {:>8}".format(*header))
    for r in rows:
        print(f"{r['n']:>9,} {r['mmdt_estimation_s']:>11.4f} {r['mmdt_tree_construction_s'] * 1e3:>9.3f} "
              f"{r['mmdt_predict_s']:>12.4f} {r['cart_fit_s']:>11.3f} {r['cart_predict_s']:>12.4f} "
              f"{r['ratio_cart_fit_over_mmdt_construction']:>9.0f} {r['ratio_cart_total_over_mmdt_total']:>11.1f} "
              f"{r['ari_mmdt_labels']:>8.3f} {r['ari_cart']:>8.3f}")
    print("fit/tree = CART fit / MMDT tree construction; total ratio = CART (fit + predict) / "
          "MMDT (estimate from labels + construct + predict)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mmdt_table1.json").write_text(json.dumps(res, indent=2))
    print(f"saved {RESULTS / 'mmdt_table1.json'}")


if __name__ == "__main__":
    main()
