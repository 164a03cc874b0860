"""The streamed run's work: embeddings read from disk in row chunks, never whole (docs/out-of-core.md).

:class:`StreamedRun` holds the steps the chunked run's stages
(:mod:`pipeline.app.stages.streamed`) call; the benchmark and the tests call them too:

- **cluster** -- ``clustering=kmeans``: MiniBatchKMeans ``partial_fit`` over every chunk
  (``clustering.params.passes`` passes, default 1), or on a Dask backend dask-ml's k-means||;
  ``clustering=gmm``: a GaussianMixture fitted on a uniform sample of
  ``clustering.params.sample_rows`` rows (default 200,000). The result is a
  :class:`StreamClusterArtifact` (centres or mixture parameters) whose ``predict`` labels chunks;
- **assign** -- per chunk (local or as Dask tasks): reference labels, concept coordinates
  ``Z Cᵀ`` when there are CAVs, per-cluster moments (one exact pass, merged in chunk order) and
  the contingency table against the ground truth; labels and coordinates stored as ``.npy``
  shards with a sha256 manifest (:class:`Shards`);
- **fit** -- every explainer: mixture-fed trees (MMDT) on the streamed means and covariances,
  the others on all rows' coordinates or on a stratified sample of ``fit.sample_rows`` rows;
- **evaluate** -- per chunk: each tree's predictions (stored as shards) and their contingency
  tables against the reference and the ground truth -> ARI/AMI, agreement, mis-assignment on
  every row.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.app.artifacts import AssignArtifact, FitArtifact, StreamClusterArtifact, StreamEvaluateArtifact
from pipeline.app.cache import file_digest
from pipeline.app.data.chunked import ChunkedArray, open_chunked
from pipeline.concepts.projection import project
from pipeline.streaming import (Contingency, ExactSums, Moments, chunk_moments, merge_moments, stratified_sample,
                                stream_kmeans)
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

STREAMED_CLUSTERINGS = ("kmeans", "gmm")
DEFAULT_GMM_SAMPLE = 200_000


# ------------------------------------------------------------------ chunked artifacts
def write_shard(folder: str, index: int, arrays: dict) -> dict:
    """Write ``arrays`` (name -> array) as ``<name>/<index>.npy`` under ``folder``, each file
    atomically (a temporary name, then rename); returns name -> (file, rows, sha256)."""
    out = {}
    for name, arr in arrays.items():
        d = Path(folder) / name
        d.mkdir(parents=True, exist_ok=True)
        final = d / f"{index:06d}.npy"
        tmp = d / f".{index:06d}.{uuid.uuid4().hex}.part"
        with open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(arr))
        os.replace(tmp, final)
        out[name] = (final.name, int(arr.shape[0]), file_digest(final))
    return out


class Shards:
    """The chunked outputs of one stage: ``<root>/<part>/<chunk>.npy`` + ``manifest.json``.

    Shards are written into a temporary sibling folder; :meth:`commit` writes the manifest (each
    shard's rows and sha256) and renames the folder into place, so a stage that fails or is
    killed leaves no half-written artifact (only a ``.<name>.*.tmp`` folder, removed by the next
    run of the stage). :func:`verify_shards` checks every shard against the manifest.
    """

    def __init__(self, root):
        self.root = Path(root)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.root.parent.glob(f".{self.root.name}.*.tmp"):  # left by a killed run of this stage
            shutil.rmtree(stale, ignore_errors=True)
        self.tmp = self.root.with_name(f".{self.root.name}.{uuid.uuid4().hex}.tmp")

    def commit(self, shard_infos: list[dict]) -> str:
        """Write the manifest, move the folder into place; returns the manifest's sha256."""
        manifest = {}
        for info in shard_infos:
            for name, (file, rows, digest) in info.items():
                manifest.setdefault(name, []).append({"file": file, "rows": rows, "sha256": digest})
        self.tmp.mkdir(parents=True, exist_ok=True)
        (self.tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if self.root.exists():
            shutil.rmtree(self.root)
        os.replace(self.tmp, self.root)
        return file_digest(self.root / "manifest.json")

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, compute, task_of, items: list, desc: str):
        """Map ``task_of(tmp folder)`` over ``items`` with ``compute``; commit, or discard on any error.
        Returns (results in chunk order, manifest sha256)."""
        try:
            results = compute.map(task_of(str(self.tmp)), items, desc=desc)
            return results, self.commit([r[0] for r in results])
        except BaseException:
            self.discard()
            raise


def verify_shards(root, manifest_sha256: str) -> None:
    """Raise :class:`pipeline.app.cache.CorruptArtifactError` unless the manifest and every shard
    under ``root`` are as written."""
    from pipeline.app.cache import CorruptArtifactError

    root = Path(root)
    manifest = root / "manifest.json"
    if not manifest.is_file() or file_digest(manifest) != manifest_sha256:
        raise CorruptArtifactError(f"{manifest} is missing or changed since it was written")
    for name, entries in json.loads(manifest.read_text()).items():
        for e in entries:
            path = root / name / e["file"]
            if not path.is_file() or file_digest(path) != e["sha256"]:
                raise CorruptArtifactError(f"shard {path} is missing or changed since it was written (sha256 differs "
                                           f"from {manifest})")


def open_part(root, name: str) -> ChunkedArray:
    """Part ``name`` of committed shards as a :class:`ChunkedArray` (verify first: :func:`verify_shards`)."""
    return open_chunked(Path(root) / name, key=str(Path(root) / name), vector=name != "X")


# ------------------------------------------------------------------ tasks (run on Dask workers too)
@dataclass(frozen=True)
class AssignTask:
    """What one chunk of the assign step needs (small and picklable)."""

    Z: ChunkedArray
    truth: ChunkedArray | None
    model: object  # anything with predict(X) -> labels: a StreamClusterArtifact
    cavs: np.ndarray | None
    n_clusters: int
    folder: str

    def __call__(self, item):
        index, (start, stop) = item
        Zc = self.Z.read(start, stop)
        labels = np.asarray(self.model.predict(Zc), dtype=np.int32)
        X = Zc if self.cavs is None else project(Zc, self.cavs)
        arrays = {"labels": labels} if self.cavs is None else {"labels": labels, "X": X}
        info = write_shard(self.folder, index, arrays)
        truth = Contingency()
        if self.truth is not None:
            truth.update(labels, self.truth.read(start, stop))
        return info, chunk_moments(X, labels, self.n_clusters), truth


@dataclass(frozen=True)
class PredictTask:
    X: ChunkedArray
    labels: ChunkedArray
    truth: ChunkedArray | None
    trees: dict  # row -> ExplanationTree
    folder: str

    def __call__(self, item):
        index, (start, stop) = item
        Xc, ref = self.X.read(start, stop), self.labels.read(start, stop)
        truth = None if self.truth is None else self.truth.read(start, stop)
        preds = {row: np.asarray(tree.predict(Xc), dtype=np.int32) for row, tree in self.trees.items()}
        info = write_shard(self.folder, index, preds)
        tables = {row: (Contingency().update(p, ref), None if truth is None else Contingency().update(p, truth))
                  for row, p in preds.items()}
        return info, tables


def _table_array(c: Contingency | None) -> np.ndarray | None:
    if c is None:
        return None
    rows = sorted((p, r, n) for (p, r), n in c.table.items())
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def _contingency(table) -> Contingency | None:
    if table is None:
        return None
    out = Contingency()
    for p, r, n in np.asarray(table, dtype=np.int64).reshape(-1, 3).tolist():
        out.table[p, r] = n
    return out


def moments_of(a: AssignArtifact) -> Moments:
    """The exact per-cluster moments an assign artifact holds."""
    shape = (int(a.counts.size), int(a.chan_means.shape[1]))
    return Moments(np.asarray(a.counts, dtype=np.int64), ExactSums(shape, a.sums_index, a.sums_hi, a.sums_lo),
                   ExactSums(shape, a.squares_index, a.squares_hi, a.squares_lo), a.chan_means, a.scatter)


def truth_of(a: AssignArtifact) -> Contingency | None:
    return _contingency(a.truth_table)


def coordinates(a: AssignArtifact, Z: ChunkedArray) -> ChunkedArray:
    """The coordinates the trees cut on: the concept coordinates' shards, or Z itself."""
    return open_part(a.shards, "X") if a.projected else Z


# ------------------------------------------------------------------ the run
STREAMED_PROTOCOLS = (None, "labels", "centers", "optional_centers", "mixture")


@dataclass
class StreamedRun:
    """One streamed run (the Python API behind ``dataset.chunk_rows``; its stages and the benchmark
    call it).

    Parameters
    ----------
    Z : ChunkedArray
        The embeddings (n, m).
    truth : ChunkedArray or None
        Ground-truth integer labels (n,) (-1: unknown), or None.
    n_clusters : int
    chunk_rows : int
    work_dir : Path
        Where chunked outputs go when no folder is given (``<work_dir>/assign``, ``<work_dir>/predict``).
    compute : LocalCompute or DaskCompute
    cavs : ndarray (M, m) or None
        Concept directions: trees cut on ``Z Cᵀ``; None: on Z.
    feature_names : list of str or None
    """

    Z: ChunkedArray
    truth: ChunkedArray | None
    n_clusters: int
    chunk_rows: int
    work_dir: Path
    compute: object
    cavs: np.ndarray | None = None
    feature_names: list | None = None
    seed: int = 0
    seconds: dict = field(default_factory=dict)

    def _timed(self, name: str, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self.seconds[name] = time.perf_counter() - t0
        log.info("%s: %.1f s", name, self.seconds[name])
        return out

    def items(self):
        return list(enumerate(self.Z.ranges(self.chunk_rows)))

    # -- cluster
    def cluster(self, method: str = "kmeans", params: dict | None = None) -> StreamClusterArtifact:
        """The reference clustering (its ``predict`` assigns chunks). ``kmeans`` on a Dask backend
        is dask-ml's k-means|| (``init='k-means||'``), else MiniBatchKMeans ``partial_fit``."""
        return self._timed("cluster", self._cluster, method, dict(params or {}))

    def _cluster(self, method, params):
        if method not in STREAMED_CLUSTERINGS:
            raise InvalidInputError(f"clustering={method} does not stream; a chunked run (dataset.chunk_rows) "
                                    f"takes clustering={' or clustering='.join(STREAMED_CLUSTERINGS)}.")
        if method == "kmeans" and getattr(self.compute, "name", "local") == "dask":
            return self._dask_ml_kmeans(params)
        if method == "kmeans":
            passes = int(params.pop("passes", 1))
            for k in ("n_init", "max_iter", "init", "tol"):
                params.pop(k, None)  # in-memory KMeans settings; partial_fit makes its own passes
            from pipeline.progress import tqdm

            chunks = len(self.Z.ranges(self.chunk_rows))
            passes_ = (tqdm(self.Z.chunks(self.chunk_rows), total=chunks, desc=f"k-means pass {p + 1}/{passes}",
                            unit="chunk", leave=False, mininterval=1.0) for p in range(passes))
            model = stream_kmeans(passes_, self.n_clusters, random_state=self.seed, n_init=3, **params)
            return StreamClusterArtifact(method="kmeans", backend="MiniBatchKMeans partial_fit",
                                         fit_rows=self.Z.n_rows, centers=np.asarray(model.cluster_centers_, np.float64))
        from sklearn.mixture import GaussianMixture

        rows = int(params.pop("sample_rows", DEFAULT_GMM_SAMPLE))
        idx = np.sort(np.random.default_rng(self.seed).choice(self.Z.n_rows, min(rows, self.Z.n_rows), replace=False))
        log.info("gmm: fitted on a uniform sample of %d of %d rows", idx.size, self.Z.n_rows)
        sample = self.Z.take(idx, self.chunk_rows).astype(np.float64)
        gm = GaussianMixture(self.n_clusters, random_state=self.seed, **params).fit(sample)
        return StreamClusterArtifact(method="gmm", backend="GaussianMixture on a uniform sample", fit_rows=int(idx.size),
                                     weights=gm.weights_, means=gm.means_, covariances=gm.covariances_,
                                     precisions_cholesky=gm.precisions_cholesky_, covariance_type=gm.covariance_type)

    def _dask_ml_kmeans(self, params):
        try:
            import dask.array as da
            from dask import delayed
            from dask_ml.cluster import KMeans
        except ImportError:
            raise InvalidInputError("compute=dask clusters with dask-ml's k-means||: pip install "
                                    "'concept-trees-pipeline[dask]' (or use compute=local).") from None
        params.pop("passes", None)
        params.pop("n_init", None)
        blocks = [da.from_delayed(delayed(self.Z.read, pure=True)(a, b), shape=(b - a, *self.Z.shape[1:]),
                                  dtype=self.Z.dtype) for a, b in self.Z.ranges(self.chunk_rows)]
        X = da.concatenate(blocks).astype(np.float64)
        options = {"init": "k-means||", "max_iter": 300, "tol": 1e-4, "oversampling_factor": 2, **params}
        log.info("dask-ml KMeans(%s) on %d chunks", ", ".join(f"{k}={v}" for k, v in options.items()), len(blocks))
        model = KMeans(n_clusters=self.n_clusters, random_state=self.seed, **options).fit(X)
        return StreamClusterArtifact(method="kmeans", backend="dask-ml k-means||", fit_rows=self.Z.n_rows,
                                     centers=np.asarray(model.cluster_centers_, np.float64))

    # -- assign
    def assign(self, model, folder=None) -> AssignArtifact:
        return self._timed("assign", self._assign, model, Path(folder or self.work_dir / "assign"))

    def _assign(self, model, folder):
        shards = Shards(folder)
        results, digest = shards.run(
            self.compute, lambda tmp: AssignTask(self.Z, self.truth, model, self.cavs, self.n_clusters, tmp),
            self.items(), "assign + project")
        moments = merge_moments(r[1] for r in results)
        truth = None
        if self.truth is not None:
            truth = Contingency()
            for r in results:
                truth = truth.merge(r[2])
        d = moments.means.shape[1]
        names = list(self.feature_names or [f"x{j}" for j in range(d)])
        return AssignArtifact(
            shards=str(folder), manifest_sha256=digest, n_rows=self.Z.n_rows, feature_names=names,
            counts=moments.counts, chan_means=moments.means, scatter=moments.scatter,
            sums_index=moments.sums.index, sums_hi=moments.sums.hi, sums_lo=moments.sums.lo,
            squares_index=moments.squares.index, squares_hi=moments.squares.hi, squares_lo=moments.squares.lo,
            projected=self.cavs is not None, truth_table=_table_array(truth))

    # -- fit
    def sample(self, assigned: AssignArtifact, sample_rows: int | None = None):
        """(row indices, their coordinates, their reference labels): a stratified sample of
        ``sample_rows`` rows, or every row."""
        labels = open_part(assigned.shards, "labels")
        labels = labels.read(0, labels.n_rows).astype(np.int64)
        n = labels.size
        if sample_rows is not None and sample_rows > n:
            raise InvalidInputError(
                f"fit.sample_rows={sample_rows} is larger than the data ({n} rows): a sample cannot hold more rows than "
                f"there are. Use fit.sample_rows=null to fit the trees on every row, or a number up to {n}.")
        idx = stratified_sample(labels, sample_rows, self.seed) if sample_rows else np.arange(n)
        if idx.size < n:
            log.info("fit: trees fitted on a stratified sample of %d of %d rows (fit.sample_rows); every row is "
                     "evaluated", idx.size, n)
        X = coordinates(assigned, self.Z)
        X = X.take(idx, self.chunk_rows) if idx.size < n else X.read(0, n)
        return idx, X, labels[idx]

    def fit(self, assigned: AssignArtifact, explainers: dict, sample_rows: int | None = None,
            centers=None) -> dict:
        """Every explainer row fitted: row -> FitArtifact (predictions left empty: they are shards)."""
        def fit_all():
            sample = self.sample(assigned, sample_rows)
            return {row: self.fit_row(row, spec, assigned, sample, centers) for row, spec in explainers.items()}

        return self._timed("fit", fit_all)

    def fit_row(self, row: str, spec: dict, assigned: AssignArtifact, sample, centers=None) -> FitArtifact:
        """One explainer on the sample (trees) or on the exact moments (``fit: mixture``: MMDT)."""
        from pipeline.app.capabilities import check_provided
        from pipeline.app.explainers import FitInputs, fit_explainer

        idx, X, labels = sample
        if spec.get("fit") not in STREAMED_PROTOCOLS:
            raise InvalidInputError(f"explainer {row!r} (fit: {spec.get('fit')}) does not run on streamed data; "
                                    "a chunked run takes explainers fitted on labels, centres or the mixture "
                                    "(mmdt, imm, cart, exkmc, spex_clique ...). Concept-MMDT's tree is MMDT on the "
                                    "concept coordinates here: explainer=mmdt with concepts=....")
        w, means, covs = moments_of(assigned).mixture()
        if assigned.projected and centers is not None:
            centers = project(np.asarray(centers, dtype=np.float64), self.cavs)
        inputs = FitInputs(X=np.asarray(X, dtype=np.float64), labels=labels, feature_names=list(assigned.feature_names),
                           n_clusters=self.n_clusters, centers=centers, mixture=(w, means, covs))
        t0 = time.perf_counter()
        check_provided(row, spec, inputs.capabilities(), "streamed", True)
        est, _ = fit_explainer(row, spec, inputs, self.seed)
        seconds = time.perf_counter() - t0
        tree = est.tree_
        log.info("fitted %s (%s) on %d rows: %d leaves, depth %d, %.2fs", row, spec.get("name", row), idx.size,
                 tree.n_leaves, tree.depth, seconds)
        stats = {k: np.asarray(getattr(est, a), dtype=np.float64) for a, k in (("means_", "means"), ("sigma_", "sigma"))
                 if hasattr(est, a)}
        return FitArtifact(row=row, name=spec.get("name", row), tree=tree.to_dict(), predictions=np.empty(0, np.int32),
                           fit_seconds=seconds, n_leaves=int(tree.n_leaves), depth=int(tree.depth),
                           fit_rows=int(idx.size), **stats)

    # -- evaluate
    def evaluate(self, assigned: AssignArtifact, fits: dict, folder=None) -> StreamEvaluateArtifact:
        return self._timed("evaluate", self._evaluate, assigned, fits, Path(folder or self.work_dir / "predict"))

    def _evaluate(self, assigned, fits, folder):
        from pipeline import metrics
        from pipeline.trees.tree import ExplanationTree

        trees = {r: ExplanationTree.from_dict(f.tree) for r, f in fits.items()}
        X, labels = coordinates(assigned, self.Z), open_part(assigned.shards, "labels")
        results, digest = Shards(folder).run(
            self.compute, lambda tmp: PredictTask(X, labels, self.truth, trees, tmp), self.items(), "predict + metrics")
        rows = [_row("reference", "reference", None, truth_of(assigned), self.n_clusters)]
        for row, fit in fits.items():
            ref, truth = Contingency(), None if self.truth is None else Contingency()
            for r in results:
                ref = ref.merge(r[1][row][0])
                if truth is not None:
                    truth = truth.merge(r[1][row][1])
            out = _row(row, fit.name, ref, truth, self.n_clusters)
            if fit.means is not None and fit.sigma is not None:
                out["q"] = float(metrics.explainability_to_noise_ratio(fit.means, fit.sigma))
                out["q_bound"] = float(metrics.theorem1_upper_bound(out["q"], len(fit.means)))
            out.update(n_leaves=int(fit.n_leaves), depth=int(fit.depth), fit_seconds=float(fit.fit_seconds),
                       fit_rows=fit.fit_rows)
            rows.append(out)
        return StreamEvaluateArtifact(shards=str(folder), manifest_sha256=digest, n_rows=self.Z.n_rows, rows=rows)


def _row(row, method, ref: Contingency | None, truth: Contingency | None, n_clusters) -> dict:
    out = {"explainer": row, "method": method}
    if truth is not None:
        out.update(ari=truth.ari(exclude_noise=True), ami=truth.ami(exclude_noise=True))
    if ref is None:
        out.update(ref_ari=1.0, ref_ami=1.0, misassignment=0.0, n_leaves=n_clusters)
    else:
        out.update(ref_ari=ref.ari(exclude_noise=True), ref_ami=ref.ami(exclude_noise=True),
                   misassignment=ref.misassignment())
    return out
