"""The streamed run: embeddings read from disk in row chunks, never whole (docs/out-of-core.md).

``python -m pipeline dataset=files dataset.path=big.npy dataset.chunk_rows=100000`` (or any
``compute=dask``) runs these steps instead of the in-memory stages:

1. **open** -- :func:`pipeline.app.data.chunked.open_chunked` on ``dataset.path`` and
   ``dataset.labels`` (lengths checked);
2. **cluster** -- ``clustering=kmeans``: MiniBatchKMeans ``partial_fit`` over every chunk
   (``clustering.params.passes`` passes, default 1); ``clustering=gmm``: a GaussianMixture fitted on a
   uniform sample of ``clustering.params.sample_rows`` rows (default 200,000);
3. **assign** -- per chunk (local or as Dask tasks): reference labels, concept coordinates
   ``Z Cᵀ`` when CAVs are given, per-cluster moments (one exact pass, merged in chunk order) and
   the contingency table against the ground truth; labels and coordinates stored as ``.npy``
   shards with a sha256 manifest;
4. **fit** -- every explainer: mixture-fed trees (MMDT) on the streamed means and covariances,
   the others on all rows' coordinates or on a stratified sample of ``fit.sample_rows`` rows;
5. **evaluate** -- per chunk: each tree's predictions (stored as shards) and their contingency
   tables against the reference and the ground truth -> ARI/AMI, agreement, mis-assignment on
   every row;
6. **report** -- results.csv/.md and trees/<row>.json + .rules.txt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.app.data.chunked import ChunkedArray, open_chunked
from pipeline.concepts.projection import mixture_sigma, project
from pipeline.streaming import Contingency, chunk_moments, merge_moments, stratified_sample, stream_kmeans
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

STREAMED_CLUSTERINGS = ("kmeans", "gmm")
DEFAULT_GMM_SAMPLE = 200_000


# ------------------------------------------------------------------ chunked artifacts
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


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
        out[name] = (final.name, int(arr.shape[0]), _sha256(final))
    return out


@dataclass
class ShardedArtifact:
    """Chunked artifacts of one stage: ``<root>/<name>/<index>.npy`` + ``manifest.json``.

    Shards are written into a temporary folder; :meth:`commit` writes the manifest (each
    shard's rows and sha256) and renames the folder into place, so a stage that fails leaves
    no half-written artifact. :meth:`open` verifies every shard against the manifest.
    """

    root: Path
    tmp: Path = field(init=False)

    def __post_init__(self):
        self.root = Path(self.root)
        self.tmp = self.root.with_name(f".{self.root.name}.{uuid.uuid4().hex}.tmp")

    def commit(self, shard_infos: list[dict]) -> None:
        manifest = {}
        for info in shard_infos:
            for name, (file, rows, digest) in info.items():
                manifest.setdefault(name, []).append({"file": file, "rows": rows, "sha256": digest})
        (self.tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if self.root.exists():
            shutil.rmtree(self.root)
        os.replace(self.tmp, self.root)

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    @staticmethod
    def open_part(root: Path, name: str) -> ChunkedArray:
        root = Path(root)
        entries = json.loads((root / "manifest.json").read_text())[name]
        for e in entries:
            path = root / name / e["file"]
            if not path.exists() or _sha256(path) != e["sha256"]:
                raise InvalidInputError(f"{path}: missing or changed since it was written (sha256 differs from "
                                        f"{root / 'manifest.json'}); delete {root} to recompute it.")
        return open_chunked(root / name, key=str(root / name), vector=name != "X")


# ------------------------------------------------------------------ tasks (run on Dask workers too)
@dataclass(frozen=True)
class AssignTask:
    """What one chunk of the assign step needs (small and picklable)."""

    Z: ChunkedArray
    truth: ChunkedArray | None
    model: object
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


# ------------------------------------------------------------------ the run
@dataclass
class StreamedRun:
    """One streamed run (the Python API behind ``dataset.chunk_rows``; the benchmark calls it too).

    Parameters
    ----------
    Z : ChunkedArray
        The embeddings (n, m).
    truth : ChunkedArray or None
        Ground-truth integer labels (n,) (-1: unknown), or None.
    n_clusters : int
    chunk_rows : int
    work_dir : Path
        Where the chunked artifacts go (``<work_dir>/assign``, ``<work_dir>/predict``).
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
    def cluster(self, method: str = "kmeans", params: dict | None = None):
        """The reference clustering model (``predict`` assigns chunks)."""
        return self._timed("cluster", self._cluster, method, dict(params or {}))

    def _cluster(self, method, params):
        if method not in STREAMED_CLUSTERINGS:
            raise InvalidInputError(f"clustering={method} does not stream; a chunked run (dataset.chunk_rows) "
                                    f"takes clustering={' or clustering='.join(STREAMED_CLUSTERINGS)}.")
        if method == "kmeans":
            passes = int(params.pop("passes", 1))
            for k in ("n_init", "max_iter", "init"):
                params.pop(k, None)  # in-memory KMeans settings; partial_fit makes its own passes
            from tqdm.auto import tqdm

            chunks = len(self.Z.ranges(self.chunk_rows))
            passes_ = (tqdm(self.Z.chunks(self.chunk_rows), total=chunks, desc=f"k-means pass {p + 1}/{passes}",
                            unit="chunk", leave=False, mininterval=1.0) for p in range(passes))
            return stream_kmeans(passes_, self.n_clusters, random_state=self.seed, n_init=3, **params)
        from sklearn.mixture import GaussianMixture

        rows = int(params.pop("sample_rows", DEFAULT_GMM_SAMPLE))
        idx = np.sort(np.random.default_rng(self.seed).choice(self.Z.n_rows, min(rows, self.Z.n_rows), replace=False))
        log.info("gmm: fitted on a uniform sample of %d of %d rows", idx.size, self.Z.n_rows)
        sample = self.Z.take(idx, self.chunk_rows).astype(np.float64)
        return GaussianMixture(self.n_clusters, random_state=self.seed, **params).fit(sample)

    # -- assign
    def assign(self, model) -> dict:
        return self._timed("assign", self._assign, model)

    def _assign(self, model):
        art = ShardedArtifact(self.work_dir / "assign")
        task = AssignTask(self.Z, self.truth, model, self.cavs, self.n_clusters, str(art.tmp))
        try:
            results = self.compute.map(task, self.items(), desc="assign + project")
            art.commit([r[0] for r in results])
        except BaseException:
            art.discard()
            raise
        moments = merge_moments(r[1] for r in results)
        truth = None
        if self.truth is not None:
            truth = Contingency()
            for r in results:
                truth = truth.merge(r[2])
        X = self.Z if self.cavs is None else ShardedArtifact.open_part(art.root, "X")
        return {"labels": ShardedArtifact.open_part(art.root, "labels"), "X": X, "moments": moments, "truth": truth}

    # -- fit
    def fit(self, assigned: dict, explainers: dict, sample_rows: int | None = None, centers=None) -> dict:
        return self._timed("fit", self._fit, assigned, explainers, sample_rows, centers)

    def _fit(self, assigned, explainers, sample_rows, centers):
        from pipeline.app.capabilities import check_provided
        from pipeline.app.explainers import FitInputs, fit_explainer

        labels = assigned["labels"].read(0, assigned["labels"].n_rows).astype(np.int64)
        n = labels.size
        if sample_rows is not None and sample_rows > n:
            raise InvalidInputError(
                f"fit.sample_rows={sample_rows} is larger than the data ({n} rows): a sample cannot hold more rows than "
                f"there are. Use fit.sample_rows=null to fit the trees on every row, or a number up to {n}.")
        idx = stratified_sample(labels, sample_rows, self.seed) if sample_rows else np.arange(n)
        if idx.size < n:
            log.info("fit: trees fitted on a stratified sample of %d of %d rows (fit.sample_rows); every row is "
                     "evaluated", idx.size, n)
        X = assigned["X"].take(idx, self.chunk_rows) if idx.size < n else assigned["X"].read(0, n)
        w, means, covs = assigned["moments"].mixture()
        names = self.feature_names or [f"x{j}" for j in range(X.shape[1])]
        inputs = FitInputs(X=X, labels=labels[idx], feature_names=list(names), n_clusters=self.n_clusters,
                           centers=centers, mixture=(w, means, covs))
        fits = {}
        for row, spec in explainers.items():
            if spec.get("fit") not in (None, "labels", "centers", "optional_centers", "mixture"):
                raise InvalidInputError(f"explainer {row!r} (fit: {spec.get('fit')}) does not run on streamed data; "
                                        "a chunked run takes explainers fitted on labels, centres or the mixture "
                                        "(mmdt, imm, cart, exkmc, spex_clique ...).")
            t0 = time.perf_counter()
            check_provided(row, spec, inputs.capabilities(), "streamed", True)
            est, _ = fit_explainer(row, spec, inputs, self.seed)
            fits[row] = {"estimator": est, "tree": est.tree_, "name": spec.get("name", row),
                         "fit_seconds": time.perf_counter() - t0, "sample_rows": int(idx.size)}
            if hasattr(est, "means_") and hasattr(est, "sigma_"):
                fits[row].update(means=est.means_, sigma=est.sigma_)
        return fits

    # -- evaluate
    def evaluate(self, assigned: dict, fits: dict) -> list[dict]:
        return self._timed("evaluate", self._evaluate, assigned, fits)

    def _evaluate(self, assigned, fits):
        from pipeline import metrics

        art = ShardedArtifact(self.work_dir / "predict")
        task = PredictTask(assigned["X"], assigned["labels"], self.truth, {r: f["tree"] for r, f in fits.items()},
                           str(art.tmp))
        try:
            results = self.compute.map(task, self.items(), desc="predict + metrics")
            art.commit([r[0] for r in results])
        except BaseException:
            art.discard()
            raise
        rows = [_row("reference", "reference", None, assigned["truth"], self.n_clusters)]
        for row, fit in fits.items():
            ref, truth = Contingency(), None if self.truth is None else Contingency()
            for r in results:
                ref = ref.merge(r[1][row][0])
                if truth is not None:
                    truth = truth.merge(r[1][row][1])
            out = _row(row, fit["name"], ref, truth, self.n_clusters)
            if "means" in fit:
                out["q"] = float(metrics.explainability_to_noise_ratio(fit["means"], fit["sigma"]))
                out["q_bound"] = float(metrics.theorem1_upper_bound(out["q"], len(fit["means"])))
            out.update(n_leaves=int(fit["tree"].n_leaves), depth=int(fit["tree"].depth),
                       fit_seconds=float(fit["fit_seconds"]), fit_rows=fit["sample_rows"])
            rows.append(out)
        return rows


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


def _streamed_config_error(cfg: dict) -> None:
    if cfg["dataset"].get("_target_") != "pipeline.app.data.files.load_from_config":
        raise InvalidInputError("dataset.chunk_rows / compute=dask: chunked runs read dataset=files (a .npy, a folder of "
                                f"shards or a zarr array), not dataset={cfg['dataset'].get('name')}.")
    if cfg["encoder"].get("name", "identity") != "identity":
        raise InvalidInputError("a chunked run takes embeddings as they are (encoder=identity); encode the data first.")
    if cfg["concepts"].get("name", "none") != "none":
        raise InvalidInputError("a chunked run cuts on the embeddings themselves (concepts=none); CAV projection of "
                                "chunks is available through pipeline.app.streamed.StreamedRun(cavs=...).")


def run_streamed(cfg: dict, out_dir: Path):
    """The streamed run of a composed (plain) config; returns the results DataFrame."""
    import pandas as pd

    from pipeline.app.compute import make_compute
    from pipeline.app.report.writer import atomic_write, write_tables

    _streamed_config_error(cfg)
    ds = cfg["dataset"]
    chunk_rows = int(ds.get("chunk_rows") or 100_000)
    if chunk_rows < 1:
        raise InvalidInputError(f"dataset.chunk_rows={chunk_rows}: give a positive number of rows per chunk.")
    Z = open_chunked(ds.get("path"), "dataset.path")
    truth = None
    if ds.get("labels"):
        truth = open_chunked(ds["labels"], "dataset.labels", vector=True)
        if truth.n_rows != Z.n_rows:
            raise InvalidInputError(f"dataset.labels={ds['labels']} holds {truth.n_rows} labels but dataset.path="
                                    f"{ds['path']} holds {Z.n_rows} rows; give one label per row (in the same order).")
        if not np.issubdtype(truth.dtype, np.integer):
            raise InvalidInputError(f"dataset.labels={ds['labels']} holds {truth.dtype} values; a chunked run takes "
                                    "integer labels (-1 = unknown); code them first.")
    K = cfg["clustering"].get("n_clusters") or (cfg["clustering"].get("params") or {}).get("n_clusters")
    if not K:
        raise InvalidInputError("a chunked run needs clustering.n_clusters (the number of clusters is not chosen "
                                "by BIC on data that does not fit in memory).")
    log.info("streamed run: %s, %d x %s %s in chunks of %d rows", Z.source, Z.n_rows, Z.shape[1:], Z.dtype, chunk_rows)
    compute = make_compute(cfg.get("compute"))
    try:
        run = StreamedRun(Z, truth, int(K), chunk_rows, out_dir / "streamed", compute,
                          feature_names=ds.get("feature_names"), seed=int(cfg.get("seed", 0)))
        params = {k: v for k, v in (cfg["clustering"].get("params") or {}).items() if k != "n_clusters"}
        model = run.cluster(cfg["clustering"]["name"], params)
        assigned = run.assign(model)
        centers = getattr(model, "cluster_centers_", getattr(model, "means_", None))
        fits = run.fit(assigned, cfg["explainer"], (cfg.get("fit") or {}).get("sample_rows"), centers)
        rows = run.evaluate(assigned, fits)
    finally:
        compute.close()
    df = pd.DataFrame(rows)
    csv, _ = write_tables(out_dir, df)
    trees = out_dir / "trees"
    trees.mkdir(parents=True, exist_ok=True)
    for row, fit in fits.items():
        atomic_write(trees / f"{row}.json", fit["tree"].to_json())
        atomic_write(trees / f"{row}.rules.txt", fit["tree"].to_text())
    atomic_write(out_dir / "streamed" / "seconds.json", json.dumps(run.seconds, indent=1))
    print(df.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3f}"))
    print(f"results written to {csv}")
    return df
