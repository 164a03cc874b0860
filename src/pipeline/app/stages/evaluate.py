"""Stage ``evaluate``: one results row per explainer plus the reference clustering itself.

Inputs: ``load`` (ground truth), ``cluster`` (the reference) and every ``fit.<row>``; a row
that failed under ``keep_going`` (studies) becomes an error row.

Columns: ``explainer, method, ari, ami`` (vs ground truth, over points whose true label is
known), ``stability`` (the reference row: mean ARI between the kept restart of the reference clustering
and its other restarts, :attr:`pipeline.clustering.Clustering.stability`; empty for methods without restarts), ``ref_ari, ref_ami`` (agreement with the reference, over non-noise reference points),
``misassignment`` (share of non-noise points the tree assigns to another cluster than the
reference), ``q`` and ``q_bound`` (MMDT explainability-to-noise ratio and the bound on the
mis-assignment probability the estimator says it satisfies, ``error_bound``: Theorem 1, Theorem 2
for the randomized tree; for mean-based trees), ``n_leaves, depth, fit_seconds``,
``n_noise, uses_labels``. Not cached: metrics are cheap.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from pipeline.app.stores.artifacts import ClusterArtifact, EvaluateArtifact, FitArtifact, LoadArtifact
from pipeline.app.stages.framework import RunContext, Stage

log = logging.getLogger(__name__)


LABEL_COLUMNS = ("ari", "ami")  # need ground-truth labels


def _agreement(a, b, mask) -> tuple[float, float]:
    from sklearn.metrics import adjusted_rand_score

    from pipeline import metrics

    if mask.sum() < 2:
        return math.nan, math.nan
    a, b = (a, b) if mask.all() else (a[mask], b[mask])
    table = metrics.contingency_table(a, b) if a.size >= metrics.FAST_AMI_ROWS else None
    if table is None:
        return float(adjusted_rand_score(a, b)), metrics.adjusted_mutual_info(a, b)
    # many rows: one count table gives both
    return metrics.adjusted_rand_from_table(table), metrics.adjusted_mutual_info_from_table(table)


def _q_and_bound(fit: FitArtifact, estimator) -> tuple[float, float]:
    """q of the tree's means/σ and the bound on the mis-assignment probability its estimator class
    says it satisfies (``estimator.error_bound``: Theorem 2 for the randomized tree; Theorem 1
    for any other tree with means and σ)."""
    from pipeline import metrics

    if fit.means is None or fit.sigma is None:
        return math.nan, math.nan
    q = float(metrics.explainability_to_noise_ratio(fit.means, fit.sigma))
    bound = getattr(estimator, "error_bound", metrics.theorem1_upper_bound)
    return q, float(bound(q, len(fit.means)))


def evaluate(y_true, reference: ClusterArtifact, fits: dict[str, FitArtifact], estimators: dict | None = None) -> list[dict]:
    """Results rows: the reference first, then one per explainer (in ``fits`` order); ``estimators``:
    each row's estimator class (its ``error_bound``)."""
    from pipeline import metrics  # scikit-learn loads with it: not on a rerun that restores the run's files

    ref = np.asarray(reference.labels)
    n_noise = int((ref < 0).sum())
    known = np.ones(len(ref), bool) if y_true is None else np.asarray(y_true) >= 0
    nonnoise = ref >= 0
    n_clusters = int(np.unique(ref[nonnoise]).size)

    def vs_truth(pred):
        return (math.nan, math.nan) if y_true is None else _agreement(np.asarray(y_true), pred, known)

    ari, ami = vs_truth(ref)
    stability = ((reference.scores or {}).get("stability") or {}).get("kept_ari") if isinstance(reference.scores, dict) else None
    rows = [{"explainer": "reference", "method": reference.method, "ari": ari,
             "stability": math.nan if stability is None else float(stability), "ami": ami, "ref_ari": 1.0,
             "ref_ami": 1.0, "misassignment": 0.0, "q": math.nan, "q_bound": math.nan, "n_leaves": n_clusters,
             "depth": math.nan, "fit_seconds": math.nan, "n_noise": n_noise,
             "uses_labels": bool(reference.uses_labels)}]
    for row, fit in fits.items():
        pred = np.asarray(fit.predictions, dtype=np.int64)
        ari, ami = vs_truth(pred)
        ref_ari, ref_ami = _agreement(ref, pred, nonnoise)
        q, bound = _q_and_bound(fit, (estimators or {}).get(row))
        rows.append({"explainer": row, "method": fit.name, "ari": ari, "ami": ami, "ref_ari": ref_ari,
                     "ref_ami": ref_ami, "misassignment": metrics.misassignment_rate(pred, ref),
                     "q": q, "q_bound": bound,
                     "n_leaves": fit.n_leaves, "depth": fit.depth, "fit_seconds": float(fit.fit_seconds),
                     "n_noise": n_noise, "uses_labels": bool(reference.uses_labels)})
        if fit.fit_rows is not None:  # fitted on a stratified sample; every row evaluated
            rows[-1]["fit_rows"] = int(fit.fit_rows)
    if y_true is None:  # no ground truth: label-based columns are left out of every table, not reported as 0/NaN
        rows = [{k: v for k, v in r.items() if k not in LABEL_COLUMNS} for r in rows]
    return rows


def evaluate_stage(rows) -> Stage:
    """The evaluate stage over the explainer rows ``rows`` (their ``fit.<row>`` stages)."""
    fit_names = tuple(f"fit.{row}" for row in rows)

    def compute(cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, ctx: RunContext, **fits) -> EvaluateArtifact:
        from pipeline.app.configuration.instantiate import locate, target_of

        done = {name[len("fit."):]: fits[name] for name in fit_names if fits.get(name) is not None}
        # the estimator classes of the rows whose trees come with means and σ (their bound)
        estimators = {row: locate(target_of(cfg["explainer"][row], "explainer"), "explainer")
                      for row, fit in done.items() if fit.means is not None}
        out = evaluate(load.y, cluster, done, estimators)
        out += [{"explainer": row, "method": cfg["explainer"][row]["name"], "error": err}
                for row, err in ctx.errors.items()]
        return EvaluateArtifact(rows=out)

    return Stage("evaluate", ("load", "cluster", *fit_names), lambda cfg: {}, compute, cached=False,
                 artifact=EvaluateArtifact)
