"""Figures for issue 6: the deep concept run (digits -> VaDE -> mnist_geometric CAVs -> concept trees).

    .venv/bin/python benchmarks/concept_default_run.py [--select 2 3] [--repeats 7] [extra Hydra overrides]

Runs ``experiment=concept_digits`` (VaDE is trained on first use and then loaded from
``paths.models_dir``; all stages are cached in ``paths.cache_dir``) once without and once
per ``--select`` value with greedy concept selection, and prints for each:

* CAV held-out accuracy per concept (mean [95% CI] over repeats, random-split accuracy, p);
* q in latent space (MMDT on VaDE's prior, σ_j = max_k sqrt(Σ_k,jj)) vs q in concept space
  (Eq. 6), with the Theorem-1 bound K·exp(-q / 4K²) (α = 1) beside the measured
  mis-assignment of the tree — on the data (vs VaDE's clusters) and on 50 000 samples
  drawn from VaDE's mixture prior itself (the quantity Theorem 1 bounds);
* ARI vs ground truth of VaDE, Concept-MMDT, Concept-CART (and latent MMDT);
* tree construction times: medians of ``--repeats`` re-fits inside this process
  (Concept-MMDT from the mixture vs CART on the concept coordinates, same data).

``--cav-scaling`` instead times :class:`CAVFitter` on synthetic latents with planted
concept directions (default 50 000 latents x 100 concepts, d = 10, default CAV settings).

Results are printed and saved to benchmarks/results/concept_default_run.json (figures:
concept_default_scatter*.png, the Concept-MMDT cuts on the root's two concepts, and
concept_default_cavs.png)
(``concept_cav_scaling.json`` for ``--cav-scaling``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from pipeline.app.stores.cache import StageCache
from pipeline.concepts import CAVFitter, concept_mixture
from pipeline.app.configuration.config import compose_config
from pipeline.metrics import (ari, concept_explainability_to_noise_ratio, explainability_to_noise_ratio,
                              misassignment_rate, theorem1_upper_bound)
from pipeline.app.running.runner import run_stages, to_plain
from pipeline.app.report.concept_plots import plot_cav_accuracy, plot_concept_scatter
from pipeline.trees import CART, MMDT, ConceptMMDT

RESULTS = Path(__file__).parent / "results"


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def sample_prior(weights, means, covs, n, rng):
    counts = rng.multinomial(n, weights / weights.sum())
    Z = np.vstack([rng.multivariate_normal(m, c, size=k) for m, c, k in zip(means, covs, counts)])
    return Z, np.repeat(np.arange(len(means)), counts)


def evaluate(overrides: list[str], repeats: int, seed: int) -> dict:
    cfg = to_plain(compose_config(["experiment=concept_digits", "paths.output_dir=/tmp/concept_default_run",
                                   *overrides]))
    cache = StageCache(Path(cfg["paths"]["cache_dir"]))
    start = time.perf_counter()
    done, fits, _ = run_stages(cfg, cache)
    pipeline_seconds = time.perf_counter() - start
    y = done["load"].artifact.y
    cl, cc, pr = done["cluster"].artifact, done["concepts"].artifact, done["project"].artifact
    Z, ref = done["encode"].artifact.Z.astype(np.float64), cl.labels
    w, mu, covs = cl.weights, cl.means, cl.covariances
    C, names = np.asarray(pr.cavs), list(pr.concept_names)
    K = len(mu)
    X = Z @ C.T

    sigma_latent = np.sqrt(np.einsum("kjj->kj", covs).max(axis=0))
    q_latent = explainability_to_noise_ratio(mu, sigma_latent)
    cmu, csig = concept_mixture(C, mu, covs)
    q_concept = concept_explainability_to_noise_ratio(cmu, csig)

    cmmdt = ConceptMMDT(C, concept_names=names, random_state=seed).fit_mixture(mu, covs)
    lmmdt = MMDT(random_state=seed).fit_mixture(mu, sigma_latent)
    ccart = CART(n_leaves=K, random_state=seed).fit(X, ref, feature_names=names)
    Zs, ks = sample_prior(w, mu, covs, 50_000, np.random.default_rng(seed))
    # Leaf labels are component ids, so mis-assignment on prior samples is P(mu_hat(x) != mu(x)).
    out = {
        "overrides": overrides, "concepts": names, "K": K, "n_samples": int(len(Z)),
        "cavs": cc.cav_summary, "selection": pr.selection,
        "q_latent": q_latent, "q_concept": q_concept,
        "bound_latent": float(theorem1_upper_bound(q_latent, K)), "bound_concept": float(theorem1_upper_bound(q_concept, K)),
        "misassign_data_concept_mmdt": misassignment_rate(cmmdt.predict(Z), ref),
        "misassign_data_latent_mmdt": misassignment_rate(lmmdt.predict(Z), ref),
        "misassign_data_concept_cart": misassignment_rate(ccart.predict(X), ref),
        "misassign_prior_concept_mmdt": float(np.mean(cmmdt.predict(Zs) != ks)),
        "misassign_prior_latent_mmdt": float(np.mean(lmmdt.predict(Zs) != ks)),
        "ari_vade": ari(y, ref), "ari_concept_mmdt": ari(y, cmmdt.predict(Z)), "ari_concept_cart": ari(y, ccart.predict(X)),
        "ari_latent_mmdt": ari(y, lmmdt.predict(Z)),
        "pipeline_ari_concept_mmdt": ari(y, fits["concept_mmdt"].predictions),
        "pipeline_ari_concept_cart": ari(y, fits["concept_cart"].predictions),
        "seconds_concept_mmdt": median_seconds(lambda: ConceptMMDT(C, random_state=seed).fit_mixture(mu, covs), repeats),
        "seconds_concept_cart": median_seconds(lambda: CART(n_leaves=K, random_state=seed).fit(X, ref), repeats),
        "seconds_stages_this_call": pipeline_seconds,
        "cache": [vars(e) for e in cache.events],
        "rules_concept_mmdt": [str(r) for r in cmmdt.tree_.rules()],
    }
    tag = "_select" + str(len(names)) if pr.selection else ""
    RESULTS.mkdir(exist_ok=True)
    plot_concept_scatter(cmmdt.tree_, X, ref).savefig(RESULTS / f"concept_default_scatter{tag}.png", dpi=90)
    plot_cav_accuracy(cc["cav_summary"]).savefig(RESULTS / "concept_default_cavs.png", dpi=90)
    return out


def show(r: dict) -> None:
    print(f"\n=== {' '.join(r['overrides']) or 'experiment=concept_digits'}: {r['n_samples']} samples, "
          f"K={r['K']}, concepts {r['concepts']}")
    if r["selection"]:
        s = r["selection"]
        print(f"selection: kept {s['selected']} of {s['all_concepts']}; q path {np.round(s['q_path'], 4).tolist()}, "
              f"q with all {s['q_all']:.4g}")
    print("CAVs fitted (before selection): accuracy [95% CI], random-split accuracy, p (Bonferroni), spread°")
    for c in r["cavs"]:
        print(f"  {c['concept']:<16} {c['score']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]  {c['random_score']:.3f}"
              f"  {c['p_value']:.2e}  {c['spread_deg']:.1f}")
    print(f"q latent {r['q_latent']:.4g} (Thm-1 bound {r['bound_latent']:.3g}) | q concept {r['q_concept']:.4g} "
          f"(Thm-1 bound {r['bound_concept']:.3g})")
    print(f"mis-assignment vs VaDE clusters: concept-MMDT {r['misassign_data_concept_mmdt']:.3f}, latent MMDT "
          f"{r['misassign_data_latent_mmdt']:.3f}, concept-CART {r['misassign_data_concept_cart']:.3f}")
    print(f"mis-assignment on samples of VaDE's prior: concept-MMDT {r['misassign_prior_concept_mmdt']:.3f}, "
          f"latent MMDT {r['misassign_prior_latent_mmdt']:.3f}")
    print(f"ARI vs truth: VaDE {r['ari_vade']:.3f} | Concept-MMDT {r['ari_concept_mmdt']:.3f} | Concept-CART "
          f"{r['ari_concept_cart']:.3f} | latent MMDT {r['ari_latent_mmdt']:.3f}")
    ratio = r["seconds_concept_cart"] / r["seconds_concept_mmdt"]
    print(f"tree time (median): Concept-MMDT {r['seconds_concept_mmdt'] * 1e3:.2f} ms, Concept-CART "
          f"{r['seconds_concept_cart'] * 1e3:.2f} ms (CART / MMDT = {ratio:.1f}x)")
    print("cache: " + ", ".join(f"{e['stage']}={'hit' if e['hit'] else 'computed'} {e['seconds']:.2f}s" for e in r["cache"]))


def cav_scaling(n: int, d: int, M: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)).astype(np.float32)
    D = rng.normal(size=(M, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    labels = (Z @ D.T + 0.5 * rng.normal(size=(n, M)) > rng.uniform(-1, 1, M)).astype(np.int8)
    t = time.perf_counter()
    f = CAVFitter(random_state=seed).fit(Z, labels)
    seconds = time.perf_counter() - t
    cos = np.sum(f.cavs_ * D[[int(c.split("_")[1]) for c in f.concept_names_]], axis=1)
    out = {"n": n, "d": d, "M": M, "seconds": seconds, "kept": len(f.concept_names_),
           "min_cos_to_planted": float(cos.min()), "median_accuracy": float(np.median(f.score_mean_)),
           "significant": int(f.significant_.sum())}
    print(f"CAVFitter on {n} x {d} latents, {M} concepts (5 repeats x 3-fold CV + random splits): {seconds:.1f} s; "
          f"{out['kept']} kept, {out['significant']} significant, min cos to planted {out['min_cos_to_planted']:.4f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--select", type=int, nargs="*", default=[2, 3])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cav-scaling", type=int, nargs=3, metavar=("N", "D", "M"), default=None,
                        help="time CAV fitting on synthetic latents instead, e.g. --cav-scaling 50000 10 100")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.cav_scaling:
        RESULTS.mkdir(exist_ok=True)
        out = cav_scaling(*args.cav_scaling, args.seed)
        (RESULTS / "concept_cav_scaling.json").write_text(json.dumps(out, indent=1))
        return
    results = []
    for select in [None, *args.select]:
        extra = [] if select is None else [f"concepts.params.select={select}"]
        r = evaluate([*args.overrides, *extra], args.repeats, args.seed)
        show(r)
        results.append(r)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "concept_default_run.json").write_text(json.dumps(results, indent=1, default=float))
    print(f"\nsaved to {RESULTS / 'concept_default_run.json'}")


if __name__ == "__main__":
    main()
