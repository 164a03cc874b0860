"""Reproduce Figure 3 (right) of Fleissner et al.: log mis-assignment probability vs q (K = 10).

    .venv/bin/python benchmarks/mmdt_figure3.py [--runs 2000] [--seed 0]

Each run draws a Gaussian mixture with K = 10 equally weighted components in d ∈ [K/2, 2K]
dimensions: means uniform in [0, 1]^d, diagonal covariances with per-axis standard
deviations s·U(0.5, 1), where the scale s is set so that q is log-uniform in
[0.5, 4000]. MMDT (and the randomized tree of Theorem 2) is grown from the population
parameters (σ_j = max_k std_kj), and P(μ̂(x) ≠ μ(x)) is computed *exactly*: with diagonal
covariances the probability that component k lands in its own leaf's box is a product of
1-D normal probabilities, evaluated in log space so errors down to e^-1000 are resolved.
A Monte-Carlo check on a few runs confirms the exact computation.

The plot shows log P against q with the Theorem 1 bound log(K e^{-q/4K²}) and, for
reference, Theorem 2's bound and Theorem 3's worst-case curve log((K-1)/(2e^q)) (a curve
attained by a specific discrete mixture, not a lower bound for these Gaussian mixtures).
Saved to benchmarks/results/mmdt_figure3.png (+ .json summary).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.special import logsumexp  # noqa: E402
from scipy.stats import norm  # noqa: E402
from tqdm import tqdm  # noqa: E402

from pipeline.metrics import (  # noqa: E402
    explainability_to_noise_ratio,
    misassignment_rate,
    theorem1_upper_bound,
    theorem2_upper_bound,
    theorem3_lower_bound,
)
from pipeline.trees import MMDT, RandomizedMMDT  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def leaf_boxes(tree, n_features):
    """{label: (lower, upper)} bounds of each leaf's box (lower < x <= upper per axis)."""
    boxes = {}
    for rule in tree.rules():
        lo, hi = np.full(n_features, -np.inf), np.full(n_features, np.inf)
        for c in rule.conditions:
            if c.op == "<=":
                hi[c.feature] = min(hi[c.feature], c.threshold)
            else:
                lo[c.feature] = max(lo[c.feature], c.threshold)
        boxes[rule.label] = (lo, hi)
    return boxes


def log_misassignment(tree, means, stds):
    """Exact log P(μ̂(x) ≠ μ(x)) for equally weighted N(μ_k, diag(stds_k²)) and an axis-aligned tree."""
    K, d = means.shape
    boxes = leaf_boxes(tree, d)
    log_err = np.empty(K)
    for k in range(K):
        lo, hi = boxes[k]
        # log of the mass outside [lo, hi] on each axis: below lo or above hi
        log_out = np.logaddexp(norm.logcdf((lo - means[k]) / stds[k]), norm.logsf((hi - means[k]) / stds[k]))
        exact = -np.expm1(np.sum(np.log1p(-np.exp(log_out))))  # 1 - Π(1 - e_j)
        # for tiny errors use the (then exact to first order) union over axes, in log space
        log_err[k] = np.log(exact) if exact > 1e-12 else logsumexp(log_out)
    return logsumexp(log_err) - np.log(K)


def random_mixture(rng, K, q_target):
    d = int(rng.integers(K // 2, 2 * K + 1))
    means = rng.uniform(0, 1, (K, d))
    shape = rng.uniform(0.5, 1.0, (K, d))
    q_unit = explainability_to_noise_ratio(means, shape.max(axis=0))
    stds = shape * np.sqrt(q_unit / q_target)  # q scales as 1 / s²
    return means, stds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--K", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mc-checks", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    K = args.K
    qs, log_p, log_p_rand, mixtures = [], [], [], []
    for r in tqdm(range(args.runs), desc="mixtures", mininterval=2):
        means, stds = random_mixture(rng, K, float(np.exp(rng.uniform(np.log(0.5), np.log(4000)))))
        sigma = stds.max(axis=0)
        mixtures.append((means, stds))
        qs.append(explainability_to_noise_ratio(means, sigma))
        log_p.append(log_misassignment(MMDT(random_state=r).fit_mixture(means, sigma).tree_, means, stds))
        log_p_rand.append(log_misassignment(RandomizedMMDT(random_state=r).fit_mixture(means, sigma).tree_,
                                            means, stds))
    qs, log_p, log_p_rand = map(np.array, (qs, log_p, log_p_rand))

    # Monte-Carlo check of the exact computation on runs with a measurable error.
    mc = []
    for r in np.flatnonzero((log_p > np.log(1e-2)) & (log_p < np.log(0.5)))[: args.mc_checks]:
        means, stds = mixtures[r]
        model = MMDT(random_state=int(r)).fit_mixture(means, stds.max(axis=0))
        sub, n_per = np.random.default_rng(int(r)), 100_000
        X = np.vstack([sub.normal(means[k], stds[k], (n_per, means.shape[1])) for k in range(K)])
        y = np.repeat(np.arange(K), n_per)
        p_mc = misassignment_rate(model.predict(X), y)
        mc.append({"run": int(r), "q": float(qs[r]), "exact": float(np.exp(log_p[r])), "monte_carlo": p_mc,
                   "monte_carlo_std_error": float(np.sqrt(p_mc * (1 - p_mc) / (n_per * K))), "n": n_per * K})

    bound1 = np.log(theorem1_upper_bound(qs, K))
    summary = {
        "runs": args.runs, "K": K, "seed": args.seed,
        "q_range": [float(qs.min()), float(qs.max())],
        "fraction_mmdt_below_theorem1": float(np.mean(log_p <= bound1)),
        "max_log_p_minus_log_bound1": float(np.max(log_p - bound1)),
        "fraction_theorem1_nonvacuous": float(np.mean(bound1 < 0)),
        "slope_log_p_vs_q_mmdt": float(np.polyfit(qs, log_p, 1)[0]),
        "slope_theorem1": -1 / (4 * K * K),
        "median_log_p_mmdt_minus_randomized": float(np.median(log_p - log_p_rand)),
        "monte_carlo_checks": mc,
    }
    for lo, hi in ((0.5, 10), (10, 100), (100, 1000), (1000, 4000)):
        sel = (qs >= lo) & (qs < hi)
        if sel.any():
            summary[f"log_p_mmdt_q_{lo:g}_{hi:g}"] = [float(log_p[sel].min()), float(np.median(log_p[sel])),
                                                      float(log_p[sel].max())]

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, qmax in zip(axes, (qs.max(), 60.0)):
        sel = qs <= qmax
        ax.scatter(qs[sel], log_p_rand[sel], s=3, alpha=0.25, color="tab:orange", label="randomized tree (Thm 2)")
        ax.scatter(qs[sel], log_p[sel], s=3, alpha=0.4, color="tab:blue", label="MMDT")
        g = np.linspace(qs.min(), qmax, 400)
        ax.plot(g, np.log(theorem1_upper_bound(g, K)), "k-", lw=2, label=r"Thm 1: $\log(K e^{-q/4K^2})$")
        ax.plot(g, np.log(theorem2_upper_bound(g, K)), "k--", lw=1, label=r"Thm 2: $\log(K\sqrt{\pi/q})$")
        with np.errstate(divide="ignore"):  # e^q underflows past q ≈ 709: use the log form there
            log_b3 = np.where(g < 700, np.log(theorem3_lower_bound(g, K)), np.log((K - 1) / 2) - g)
        ax.plot(g, log_b3, "r:", lw=1.5,
                label=r"Thm 3 worst case: $\log\frac{K-1}{2e^q}$")
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xlabel("explainability-to-noise ratio q")
        ax.set_ylabel(r"$\log P(\hat\mu(x) \neq \mu(x))$")
        ax.set_ylim(max(min(log_p[sel].min(), log_p_rand[sel].min()) - 5, -3000), 5)
    axes[0].set_title(f"K={K}, {args.runs} random GMMs, d∈[{K // 2},{2 * K}]")
    axes[1].set_title("zoom: q ≤ 60")
    axes[1].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / "mmdt_figure3.png", dpi=120)
    (RESULTS / "mmdt_figure3.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"saved {RESULTS / 'mmdt_figure3.png'}")


if __name__ == "__main__":
    main()
