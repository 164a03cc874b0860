"""The typed artifacts the stages pass to one another: one small frozen dataclass per stage.

A stage's ``compute`` returns its artifact type and the stages after it read named fields
(``encode.Z``, ``cluster.labels``, ``project.latent_mixture``), so a misspelt or renamed
field is an ``AttributeError`` a type checker reports, not a ``KeyError`` deep inside a run.
Cached stages store :meth:`Artifact.to_record` (a flat dict: arrays to ``arrays.npz``, the
rest to ``meta.json``, checksummed by :mod:`pipeline.app.stores.cache`, exactly as before) and read
it back with :meth:`Artifact.from_record`, which refuses a record with fields the type does
not declare (a stale or foreign cache entry is recomputed, never half-read).

Fields are None when a stage has nothing to put there (an encoder without a cluster head, a
clustering without a mixture, a run without concepts). Uncached artifacts (train, project,
evaluate, report) may hold any Python object.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
from scipy import sparse


class ArtifactFieldError(ValueError):
    """A record (cache entry or a concept source's dict) with fields its artifact type lacks."""


@dataclass(frozen=True)
class Artifact:
    """Base of every stage artifact: record conversion for the cache."""

    stage: ClassVar[str] = ""
    #: the artifact names the key later stages see (its product's identity, :meth:`product_key`)
    keyed_by_product: ClassVar[bool] = False

    def product_key(self, key: str) -> str:
        """The key later stages see for this (uncached) artifact computed under ``key``."""
        return key

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def to_record(self) -> dict:
        """The flat dict the cache stores (None fields left out, as the stages wrote them before)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_record(cls, record: dict):
        """The artifact of a stored record; fields it does not declare raise :class:`ArtifactFieldError`."""
        names = cls.field_names()
        unknown = sorted(set(record) - set(names))
        if unknown:
            raise ArtifactFieldError(f"{cls.__name__} ({cls.stage} stage) has no field(s) {unknown}; its fields "
                                     f"are {list(names)}.")
        try:
            return cls(**record)
        except TypeError as exc:  # a required field missing
            raise ArtifactFieldError(f"{cls.__name__} ({cls.stage} stage): {exc}") from None


@dataclass(frozen=True)
class LoadArtifact(Artifact):
    """Stage ``load``: the dataset. ``X`` (n, d) for tables and images, ``texts`` for text data."""

    stage: ClassVar[str] = "load"
    name: str
    kind: str
    feature_names: list | None = None
    class_names: list | None = None
    meta: dict | None = None
    X: np.ndarray | None = None
    texts: list | None = None
    y: np.ndarray | None = None
    images: np.ndarray | None = None
    raw: np.ndarray | None = None  # a standardised table's columns in their own units (meta["standardized"])

    @property
    def inputs(self):
        """What the encoder reads: the texts of a text dataset, else ``X``."""
        return self.texts if self.kind == "text" else self.X


@dataclass(frozen=True)
class TrainArtifact(Artifact):
    """Stage ``train`` (not cached): the encoder in memory (None when a checkpoint holds it),
    its checkpoint path and sha256, and the model an encoder that may substitute one loaded."""

    stage: ClassVar[str] = "train"
    keyed_by_product: ClassVar[bool] = True  # a trained encoder is known by its checkpoint's sha256
    encoder: Any = None
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    model_used: str | None = None

    def product_key(self, key: str) -> str:
        from pipeline.app.stores.cache import make_key

        return make_key("train", {"checkpoint_sha256": self.checkpoint_sha256, "model_used": self.model_used}, [key])


@dataclass(frozen=True)
class EncodeArtifact(Artifact):
    """Stage ``encode``: latents ``Z`` (n, m) and their names; the encoder's cluster head and
    mixture prior when it has them; the checkpoint (relative to ``paths.models_dir``) and its sha256."""

    stage: ClassVar[str] = "encode"
    Z: np.ndarray
    latent_names: list
    head_labels: np.ndarray | None = None
    mixture_weights: np.ndarray | None = None
    mixture_means: np.ndarray | None = None
    mixture_covariances: np.ndarray | None = None
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None


@dataclass(frozen=True)
class ClusterArtifact(Artifact):
    """Stage ``cluster``: the reference clustering (a :class:`pipeline.clustering.Clustering`
    flattened for the cache: the graph as COO rows, columns and values). ``fit_rows`` and
    ``fit_labels``: the rows a clustering fitted on a sample was fitted on, and the labels the fit
    gave them (None: fitted on every row, whose labels are ``labels``)."""

    stage: ClassVar[str] = "cluster"
    labels: np.ndarray
    method: str
    uses_labels: bool = False
    scores: Any = None
    centers: np.ndarray | None = None
    weights: np.ndarray | None = None
    means: np.ndarray | None = None
    covariances: np.ndarray | None = None
    graph_row: np.ndarray | None = None
    graph_col: np.ndarray | None = None
    graph_data: np.ndarray | None = None
    fit_rows: np.ndarray | None = None
    fit_labels: np.ndarray | None = None

    @classmethod
    def from_clustering(cls, c, fit_rows=None, fit_labels=None) -> "ClusterArtifact":
        arrays = {name: np.asarray(getattr(c, name), dtype=np.float64)
                  for name in ("centers", "weights", "means", "covariances") if getattr(c, name) is not None}
        graph = {}
        if c.graph is not None:
            g = sparse.coo_matrix(c.graph)
            graph = {"graph_row": g.row.astype(np.int64), "graph_col": g.col.astype(np.int64), "graph_data": g.data}
        if fit_rows is not None:
            arrays.update(fit_rows=np.asarray(fit_rows, dtype=np.int64), fit_labels=np.asarray(fit_labels, np.int64))
        return cls(labels=c.labels, method=c.method, uses_labels=c.uses_labels, scores=c.scores, **arrays, **graph)

    def predictor(self, Z, max_rows: int | None = None):
        """The clustering's rule for a new latent row (:func:`pipeline.cluster_heads.predictor_of`)
        over the latents ``Z`` of the run's rows (an array or a view read by row); for a rule that
        needs the rows it was fitted on, at most ``max_rows`` of them, a uniform sample (seeded) when
        there are more."""
        from pipeline.cluster_heads import predictor_of
        from pipeline.clustering import Clustering

        c = Clustering(np.asarray(self.labels), self.method, centers=self.centers, weights=self.weights,
                       means=self.means, covariances=self.covariances,
                       scores=self.scores if isinstance(self.scores, dict) else {})
        rows = np.arange(len(self.labels)) if self.fit_rows is None else np.asarray(self.fit_rows)
        labels = np.asarray(self.labels if self.fit_labels is None else self.fit_labels)
        if max_rows is not None and len(rows) > max_rows:
            keep = np.sort(np.random.default_rng(0).choice(len(rows), max_rows, replace=False))
            rows, labels = rows[keep], labels[keep]

        def fitted():  # read only by a rule that needs them
            return np.asarray(Z[rows] if len(rows) < len(Z) else Z[:len(Z)])

        return predictor_of(c, fitted, labels)

    def graph(self):
        """The similarity graph as a CSR matrix (n, n), or None."""
        if self.graph_row is None:
            return None
        n = len(self.labels)
        return sparse.csr_matrix((self.graph_data, (self.graph_row, self.graph_col)), shape=(n, n))

    def mixture(self) -> tuple | None:
        """(weights, means, covariances) of a mixture clustering, else None."""
        return None if self.means is None else (self.weights, self.means, self.covariances)

    def provided(self) -> set[str]:
        """What a finished clustering hands to explainers (see :mod:`pipeline.app.startup.capabilities`)."""
        have = {"labels"}
        if self.centers is not None:
            have.add("centers")
        if self.means is not None and self.covariances is not None:
            have.add("mixture")
        if self.graph_row is not None:
            have.add("graph")
        return have


@dataclass(frozen=True)
class ConceptsArtifact(Artifact):
    """Stage ``concepts``: concept names and CAVs ``cavs`` (n_concepts, m) with the CAV fitter's
    table; every field None with ``concepts=none`` (:attr:`enabled` False)."""

    stage: ClassVar[str] = "concepts"
    concept_names: list | None = None
    cavs: np.ndarray | None = None
    cav_summary: list | None = None
    cav_dropped: dict | None = None
    cav_scores: np.ndarray | None = None
    concept_set: str | None = None
    cav_fitter: str | None = None
    cav_fitter_path: str | None = None  # the fitter's class (dotted path): further CAVs are fitted alike
    n_concept_examples: int | None = None
    selection: dict | None = None
    cav_calibration: list | None = None  # (slope, intercept) per concept: P(concept | z) = σ(a⟨c, z⟩ + b)
    units: str | None = None  # the concept set's default display units (probability | percentile)
    discovery: list | None = None  # concepts=discovered: one row per concept (name, association, AUC, ...)
    discovery_method: str | None = None  # nmf | ica
    top_examples: np.ndarray | None = None  # (n_concepts, n_examples) rows expressing each concept most
    cav_test: str | None = None  # the significance test and intervals of the CAV table, in one line
    provenance: list | None = None  # per concept: where its positives / negatives came from, from_run, note
    concept_notes: list | None = None  # notes for the reader (near-parallel CAVs, discovery limits)
    measurements: np.ndarray | None = None  # measured concepts: every row's measured values (n, k), issue 47
    measures: list | None = None  # one dict per column of measurements: name, description, unit, split, cut ...
    fit_rows: np.ndarray | None = None  # the rows (mask) the measured concepts' CAVs were fitted on
    test_positives: np.ndarray | None = None  # up to 1,000 positives' latents per concept, stacked (TCAV's test)
    test_positive_counts: list | None = None  # how many of them each concept has, in concept order

    @property
    def enabled(self) -> bool:
        return self.cavs is not None


@dataclass(frozen=True)
class CoordinatesArtifact(Artifact):
    """Stage ``coordinates``: every row's concept coordinates ``X = Z Cᵀ`` (n, M) on every CAV of
    the concepts stage (float64; None without concepts). The project stage takes the columns of the
    concepts the trees use."""

    stage: ClassVar[str] = "coordinates"
    X: np.ndarray | None = None


@dataclass(frozen=True)
class ConceptTestsArtifact(Artifact):
    """Stage ``concept_tests`` (issue 48): each concept tested on the run it explains — TCAV's
    significance test through the clustering (per concept × cluster: the main CAV's TCAV score,
    adjusted p-values) and whether it transfers to the data (tracking ρ, AUC or calibration) — and
    the concepts kept out of the trees, with why. Empty without concepts."""

    stage: ClassVar[str] = "concept_tests"
    names: list | None = None
    tcav: np.ndarray | None = None  # (M, K) share of each cluster's rows whose posterior rises along the CAV
    p_values: np.ndarray | None = None  # (M, K) Bonferroni-adjusted two-sided p-values (NaN: untested)
    significant: list | None = None  # per concept: True / False / None (not tested)
    test_line: str | None = None  # the test in one sentence
    alpha: float | None = None  # its family-wise level
    untested: dict | None = None  # concept -> why its significance was not tested
    weak: dict | None = None  # concept -> not significant on a weak test (too few examples per dimension): kept
    transfer: list | None = None  # per concept: {check, value, threshold, passes, note}
    excluded: dict | None = None  # concept -> why it is kept out of the trees
    kept_failing: list | None = None  # concepts that failed but were kept (concepts.tests.keep_failed=true)
    head: str | None = None  # the clustering's rule the scores are taken through
    no_head: str | None = None  # why there is none (no TCAV score, no test)

    @property
    def enabled(self) -> bool:
        return self.names is not None


@dataclass(frozen=True)
class ProjectArtifact(Artifact):
    """Stage ``project`` (not cached): the coordinates trees cut on, ``X`` (n, d) with their
    ``feature_names`` (latents, or concept coordinates Z Cᵀ), the centres and mixture in those
    coordinates, the latents and latent mixture, and the CAVs actually used."""

    stage: ClassVar[str] = "project"
    X: np.ndarray
    feature_names: list
    latent_X: np.ndarray
    latent_names: list
    centers: np.ndarray | None = None
    mixture: tuple | None = None
    latent_mixture: tuple | None = None
    cavs: np.ndarray | None = None
    concept_names: list | None = None
    selection: dict | None = None
    units: list | None = None  # one display map per concept (pipeline.concepts.units), None: raw
    units_kind: str | None = None  # probability | percentile | raw
    # measured concepts (issue 47): per concept column, its rows' measured values and the measure it reads
    # ({"values": (n, M) with NaN columns for unmeasured concepts, "measures": [dict or None per column]})
    measured: dict | None = None


@dataclass(frozen=True)
class FitArtifact(Artifact):
    """Stage ``fit.<row>``: one explainer's tree (``ExplanationTree.to_dict``), predictions on
    the projected rows (cluster ids in the smallest integer type holding them), fit time, size,
    and the means/σ the tree was fitted with (MMDT family)."""

    stage: ClassVar[str] = "fit"
    row: str
    name: str
    tree: dict
    predictions: np.ndarray
    fit_seconds: float
    n_leaves: int
    depth: int
    means: np.ndarray | None = None
    sigma: np.ndarray | None = None
    fit_rows: int | None = None  # the rows the tree was fitted on when not every row (a stratified sample)
    leaves: np.ndarray | None = None  # each projected row's leaf (the report reads the tree without routing again)


@dataclass(frozen=True)
class EvaluateArtifact(Artifact):
    """Stage ``evaluate`` (not cached): the results rows, the reference first."""

    stage: ClassVar[str] = "evaluate"
    rows: list


@dataclass(frozen=True)
class BaselinesArtifact(Artifact):
    """Stage ``baselines`` (concept runs): the completeness table (Yeh et al.'s figure through the
    clustering's head, the probe ratio, beside random and principal directions) and the CART
    baseline, on one sample of rows; None without concepts. Stage ``completeness`` adds the trees'
    concept importance."""

    stage: ClassVar[str] = "baselines"
    completeness: dict | None = None  # pipeline.concept_quality.completeness_table (concepts, random, principal)
    tree_baseline: dict | None = None  # pipeline.concept_quality.tree_baseline
    head: str | None = None  # the reference clustering's rule used as the head
    no_head: str | None = None  # why the clustering has no head (no Yeh figure)


@dataclass(frozen=True)
class CompletenessArtifact(Artifact):
    """Stage ``completeness`` (concept runs): how much the concepts can explain beside random and
    principal directions (Yeh et al.'s completeness through the clustering's head, the probe ratio,
    a CART baseline) and each concept's permutation importance per explainer row (row -> {concept:
    importance}); None without concepts."""

    stage: ClassVar[str] = "completeness"
    completeness: dict | None = None  # pipeline.concept_quality.completeness_table (concepts, random, principal)
    importance: dict | None = None
    tree_baseline: dict | None = None  # pipeline.concept_quality.tree_baseline
    head: str | None = None  # the reference clustering's rule used as the head
    no_head: str | None = None  # why the clustering has no head (no Yeh figure)


@dataclass(frozen=True)
class CounterfactualsArtifact(Artifact):
    """Stage ``counterfactuals``: one row per (method, from, to) with its correctness/coverage,
    the explanations' changes ``deltas`` (n_rows, d) in the explained ``space``."""

    stage: ClassVar[str] = "counterfactuals"
    rows: list
    deltas: np.ndarray
    feature_names: list
    space: str
    eps: float
    l1: float
    self_similarity: Any = None


@dataclass(frozen=True)
class FiguresArtifact(Artifact):
    """Stage ``figures`` (not cached): the trees' figures under way, started as soon as the trees
    are evaluated so that worker processes draw them while the later stages run; the report stage
    writes them (``finish``) and closes ``encoder``."""

    stage: ClassVar[str] = "figures"
    data: Any = None  # run_report.tree_data: the rows the trees are annotated on
    ari: dict | None = None  # explainer row -> ARI (the figures' titles)
    renders: Any = None  # the render cache (report.render_cache.RenderCache)
    finish: Any = None  # () -> written paths: waits for the encodings and writes figures/<row>.*
    encoder: Any = None  # report.encoding.Encoder, or None (report.figures=false)


@dataclass(frozen=True)
class ReportArtifact(Artifact):
    """Stage ``report`` (not cached): the results table and the files written."""

    stage: ClassVar[str] = "report"
    df: Any
    csv: Any
    fits: dict
    table2: Any = None
    counterfactuals_csv: Any = None
    html: Any = None
    data: Any = None  # the rows the trees were annotated on (run_report.tree_data), with their readings
