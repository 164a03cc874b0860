"""Stages ``baselines`` and ``completeness``: how much the concepts explain, beside meaningless directions (issue 48).

On a concept run, with the reference clustering's own rule as the head
(:func:`pipeline.cluster_heads.head_of`: a GMM's most probable component, VaDE's mixture prior, the
nearest k-means centre), stage ``baselines`` (right after ``project``: it reads no tree) computes on
one stratified sample of at most 5,000 rows:

* Yeh et al.'s completeness of the concept directions — latents rebuilt from the concept scores by
  an affine map (the headline) and by a small network — and the linear-probe ratio, each beside
  the same figure for M random directions (median and range over 20 draws) and the top-M
  principal directions (:func:`pipeline.concept_quality.completeness_table`);
* the agreement with the reference of a CART tree with K leaves on the concepts, on random and on
  principal directions of the same rows (:func:`pipeline.concept_quality.tree_baseline`).

Where the run has a worker process for its stages ahead (the CAV fits of a run out of core), the
worker computes them while the trees are fitted (:meth:`pipeline.app.execution.executor.Executor.submit_ahead`);
otherwise this process does, at once. The same artifact either way.

Stage ``completeness`` (after the trees) adds each concept's permutation importance per explainer
row on the concept coordinates (:func:`pipeline.concepts.completeness_probe.permutation_importance`):
its artifact is what the console, the report and ``concepts/completeness.json`` show.

Both cached (a few seconds). Without concepts their artifacts are empty.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.stores.artifacts import (BaselinesArtifact, ClusterArtifact, CompletenessArtifact, EncodeArtifact,
                                           FitArtifact, ProjectArtifact)
from pipeline.app.data.budget import SAMPLES
from pipeline.app.stages.framework import RunCallback, Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def reference_head(cluster: ClusterArtifact, Z=None, rows=None) -> tuple[object | None, str]:
    """(the reference clustering's rule for a latent point as a head, or None; which rule, or why none).
    ``Z``: latents of the rows ``rows`` (all rows when None), giving a k-means head its spread."""
    from pipeline.cluster_heads import head_of

    scaled = bool((cluster.scores or {}).get("scaled")) if isinstance(cluster.scores, dict) else False
    labels = np.asarray(cluster.labels) if rows is None else np.asarray(cluster.labels)[rows]
    try:
        return head_of(cluster.method, weights=cluster.weights, means=cluster.means, covariances=cluster.covariances,
                       centers=cluster.centers, scaled=scaled, Z=Z, labels=labels)
    except InvalidInputError as exc:
        return None, f"its fitted parameters cannot assign a point ({exc})"


def compute_baselines(Zs: np.ndarray, C: np.ndarray, Xs: np.ndarray, y: np.ndarray, k: int, head, rule: str,
              seed: int) -> BaselinesArtifact:
    """The completeness table and the tree baseline of the sampled rows (latents ``Zs``, concept
    coordinates ``Xs``, reference labels ``y``) for the concept directions ``C``: both on the same
    rows and the same principal directions; ``k``: the run's clusters (the trees' leaves). A module
    function: a worker process runs it."""
    import time

    from pipeline.concept_quality import completeness_table, principal_directions, tree_baseline

    start = time.perf_counter()
    top = principal_directions(Zs, C.shape[0])  # one SVD of the sample for both: every BLAS thread
    try:
        table = completeness_table(Zs, C, y, head, max_rows=len(y), principal=top, random_state=seed)
    except InvalidInputError as exc:
        log.warning("concept completeness not computed: %s", exc)
        table = {"error": str(exc)}
    try:
        trees = (tree_baseline(Xs, Zs, C, y, k, max_rows=len(y), principal=top, random_state=seed)
                 if k >= 2 else None)
    except InvalidInputError as exc:
        log.warning("tree baseline not computed: %s", exc)
        trees = None
    if "affine" in table:
        log.info("concept completeness (Yeh, affine) %.3f; %d random directions: median %.3f (baselines: %.2fs)",
                 table["affine"]["concepts"], table["n_concepts"], table["affine"]["random"]["median"],
                 time.perf_counter() - start)
    return BaselinesArtifact(completeness=table, tree_baseline=trees, head=rule if head is not None else None,
                             no_head=None if head is not None else rule)


def keeps_worker(plan, done: dict, concepts) -> bool:
    """Whether the worker that fitted the CAVs ahead stays for the completeness baselines: on a
    concept run whose concept coordinates (rows x concepts, float64, held by this process from the
    clustering's pass on) fit in the memory budget (``dataset.memory_budget``). A kept worker holds
    ~0.2 GB of imports while the trees are fitted; at 10M rows the coordinates alone take 1.6 GB
    and the run's memory is worth more than the seconds, so the baselines are computed here there."""
    encode = done.get("encode")
    cavs = getattr(concepts, "cavs", None)
    if encode is None or cavs is None:
        return False
    return int(encode.artifact.Z.shape[0]) * int(np.shape(cavs)[0]) * 8 <= plan.rows.budget


def baseline_inputs(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact, C, X) -> tuple:
    """The arguments of :func:`compute_baselines` for the concept directions ``C`` (M, m) and their
    coordinates ``X`` (n, M): the row plan's stratified sample (its latents read once: the head's
    spread and both baselines), the clustering's head and the number of clusters."""
    from pipeline.concepts.completeness_probe import sample_rows

    labels = np.asarray(cluster.labels)
    rows = sample_rows(labels, SAMPLES["completeness"], random_state=cfg["seed"])
    Zs = np.asarray(encode.Z[rows], dtype=np.float64)
    head, rule = reference_head(cluster, Zs, rows)
    k = int(np.count_nonzero(np.bincount(labels[labels >= 0]))) if labels.size else 0
    return (Zs, np.asarray(C, dtype=np.float64), np.asarray(X[rows], dtype=np.float64), labels[rows], k, head, rule,
            cfg["seed"])


def _baselines(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact, project: ProjectArtifact, ctx):
    if project.cavs is None:  # concepts=none
        return BaselinesArtifact()
    from pipeline.app.execution.workers import WorkerLost
    from pipeline.app.stages.framework import Deferred

    executor = ctx.work(cfg)
    C = np.asarray(project.cavs, dtype=np.float64)
    ahead = executor.take_ahead("baselines")  # started on every concept as the tests began (BaselinesAhead)
    # the same directions (compute_baselines' C) are the same coordinates' columns, and the sample and
    # head come from the same clustering: the work started then is this stage's
    if ahead is not None and np.array_equal(ahead[0][1], C):
        args, call = ahead
    else:
        if ahead is not None:
            log.debug("the baselines started on every concept do not apply (the trees use fewer): computed again")
        args = baseline_inputs(cfg, encode, cluster, C, project.X)
        call = executor.submit_ahead(compute_baselines, *args)
    if call is None:
        return compute_baselines(*args)

    def build() -> BaselinesArtifact:  # status.json's seconds: the wait; the log line has the worker's
        try:
            return call.result()
        except WorkerLost as exc:
            log.warning("%s; computing the completeness baselines in this process", exc)
            return compute_baselines(*args)

    return Deferred(build)


class BaselinesAhead(RunCallback):
    """Where the CAVs' worker is kept for the baselines (:func:`keeps_worker`), hand it the baselines
    on every concept as the concept tests begin: the tests leave a core idle for about a second, and
    the trees then have both. Stage ``baselines`` takes that result when the trees use every concept
    (no concept kept out by its tests, no selection: the same directions, compared), else computes its own."""

    def on_stage_start(self, stage, cfg, ctx, done):
        if stage.name != "concept_tests" or not {"encode", "cluster", "concepts", "coordinates"} <= set(done):
            return None
        executor = ctx.work(cfg)
        if not executor.has_worker or ctx.cache.holds(stage.store or stage.name, stage.key(cfg, done)):
            return None  # no worker kept; or a rerun (the tests cached, the baselines with them)
        concepts, coordinates = done["concepts"].artifact, done["coordinates"].artifact
        if concepts.cavs is None or coordinates.X is None:
            return None
        args = baseline_inputs(cfg, done["encode"].artifact, done["cluster"].artifact, concepts.cavs, coordinates.X)
        executor.submit_ahead(compute_baselines, *args, tag="baselines", one_thread=True)
        return None


BASELINES = Stage("baselines", ("encode", "cluster", "project"), lambda cfg: {"seed": cfg["seed"]}, _baselines,
                  artifact=BaselinesArtifact)


def completeness_stage(rows) -> Stage:
    """The completeness stage over explainer rows ``rows`` (their ``fit.<row>`` stages): the
    baselines and each concept's importance per tree."""
    fit_names = tuple(f"fit.{row}" for row in rows)

    def compute(cfg: dict, baselines: BaselinesArtifact, cluster: ClusterArtifact, project: ProjectArtifact,
                **fits: FitArtifact | None) -> CompletenessArtifact:
        if project.cavs is None:  # concepts=none
            return CompletenessArtifact()
        from pipeline.concepts.completeness_probe import permutation_importance
        from pipeline.trees.tree import ExplanationTree

        names = list(project.feature_names)
        importance = {}
        for name in fit_names:
            fit = fits.get(name)
            if fit is None:
                continue
            tree = ExplanationTree.from_dict(fit.tree)
            if tree.n_features != len(names):  # a row on other coordinates (latents): no concept importance
                continue
            drop = permutation_importance(tree.predict, project.X, cluster.labels, random_state=cfg["seed"])
            importance[fit.row] = {n: float(v) for n, v in zip(names, drop)}
        return CompletenessArtifact(completeness=baselines.completeness, importance=importance,
                                    tree_baseline=baselines.tree_baseline, head=baselines.head,
                                    no_head=baselines.no_head)

    # version 3: the baselines from stage baselines (one sample of at most 5,000 rows for the table and the trees)
    return Stage("completeness", ("baselines", "cluster", "project", *fit_names), lambda cfg: {"seed": cfg["seed"]},
                 compute, artifact=CompletenessArtifact, version=3)
