"""The saved explainer of a run, ``<run>/explainer/``: everything needed to go from a new raw
input to its explanation, in open formats (docs/explain.md).

Files (no pickle anywhere; every one listed with its sha256 in ``SHA256SUMS``, the format
``sha256sum -c`` reads):

* ``explainer.json``: the format version, the package versions it was written with, what the
  encoder takes (kind, shape, dtype, column names), the encoder (its config node, a reference
  to its checkpoint or pretrained weights with their sha256 — not a copy unless asked), the
  reference clustering's method and how it assigns a new point, the coordinates the trees cut
  on (concept names, display units), every tree's file, name, feature names, digest, its rules
  as the run printed them and its training figures, every array's shape, dtype and sha256, and
  the digest of its own content (``content_sha256``);
* ``arrays.npz`` (read with ``allow_pickle=False``): the CAV matrix, the reference clustering's
  parameters (centres, mixture), the training range and spread of every tree coordinate, the
  training quantiles new inputs and latents are compared with (:mod:`pipeline.app.explainer.input_drift`)
  and, for percentile units, the training coordinates they rank against;
* ``trees/<row>.json``: each tree in the shared tree format (``ExplanationTree.to_dict``);
* ``weights/`` (only with ``copy_weights=True``): the encoder checkpoint and its sidecar.

:func:`write_run_bundle` writes it at the end of every finished run (into a temporary folder
renamed into place, so a bundle is complete or absent); :func:`read_bundle` verifies its files,
``explainer.json``, arrays and trees against each other before anything is used
(:mod:`pipeline.app.explainer.bundle_checks`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import json
import logging
import os
import platform
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.app.explainer.bundle_checks import (DERIVED, FORMAT, SUMS, array_record, content_digest, tree_digest,
                                                  verify_bundle)
from pipeline.app.stores.cache import file_digest, fsync_path
from pipeline.app.data.budget import PERCENTILE_ROWS, sorts_every_column
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

VERSION = 3  # 2: explainer.json records its content digest, each tree's and array's (bundle_checks);
# 3: the reference clustering's predictor (pipeline.cluster_heads): the rows a clustering without a rule of
# its own was fitted on (nearest_row), where 2 kept the nearest cluster means
PACKAGES = ("numpy", "scipy", "scikit-learn", "pandas", "torch", "timm", "sentence-transformers")


@dataclass
class Bundle:
    """A loaded (verified) explainer bundle: its JSON document, arrays and trees."""

    doc: dict
    arrays: dict = field(default_factory=dict)
    trees: dict = field(default_factory=dict)  # row -> ExplanationTree
    path: Path | None = None  # where it was read from (None: built in memory from a run)


def package_versions() -> dict:
    """Python, this package and the numeric packages installed here (those that are)."""
    from importlib import metadata

    import pipeline

    out = {"python": platform.python_version(), "pipeline": pipeline.__version__}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


# ------------------------------------------------------------------ building from a run
def rule_texts(tree, X, units=None, reading=None) -> dict[str, dict]:
    """Per leaf (id as str): the rule as the run prints it (``text``, exact shortest decimals in
    the run's units, without the leaf annotations) and its raw path (``raw``); ``reading``: the
    report's :meth:`ExplanationTree.read` on the same rows, when at hand."""
    from pipeline.trees.tree import Reading

    try:
        rules = tree.rules(reading=reading or Reading(tree.display(X, units), {}))  # no leaf statistics: dropped
    except InvalidInputError:  # deeper than rules are printed: routed and explained, without rule text
        return {}
    return {str(r.leaf): {"text": dataclasses.replace(r, stats=None).format(),
                          "raw": dataclasses.replace(r, stats=None).format(simplified=False)} for r in rules}


def printed_tests(tree, X, units=None, display=None) -> dict[str, dict]:
    """Per internal node (id as str): its test as the rules print it, so that a new sample can be
    checked against the printed text (:func:`printed_rule_holds`): ``kind`` raw / units / oblique,
    the feature or the printed weights, the printed threshold and, for a decreasing display map,
    ``flip``."""
    from pipeline.trees.display import RuleDisplay

    out = {}
    for n, shown in (display or RuleDisplay(tree, X, units)).printed_tests().items():
        try:
            t = float(shown["threshold"])
        except ValueError:
            continue
        test = {"kind": shown["kind"], "threshold": t, "flip": shown["flip"]}
        if shown["kind"] == "oblique":
            test["terms"] = [[int(j), float(w)] for j, w, _ in shown["terms"]]
        else:
            test["feature"] = int(shown["feature"])
        if shown["units"] is not None and units is not None and shown["units"] is not units[shown["feature"]]:
            test["fallback"] = True  # printed in the units' fallback (a probability's tail read as a percentile)
        out[str(n)] = test
    return out


#: a reference clustering without a rule of its own keeps at most this many of the rows it was
#: fitted on (its nearest-row rule; more are a uniform sample of them, which the bundle says)
FITTED_ROWS_KEPT = 200_000


def _reference(cluster, Z) -> tuple[dict, dict]:
    """How the reference clustering assigns a new latent point (its predictor,
    :meth:`pipeline.app.stores.artifacts.ClusterArtifact.predictor`), and the arrays it needs."""
    labels = np.asarray(cluster.labels)
    k = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    predictor = cluster.predictor(Z, max_rows=FITTED_ROWS_KEPT)
    record = predictor.to_dict()
    doc = {"method": cluster.method, "n_clusters": k, "assign": record.pop("kind"), "note": predictor.rule}
    if hasattr(predictor, "rows"):  # the rows it was fitted on: all of them, or a sample said so
        fitted = len(labels) if cluster.fit_rows is None else len(cluster.fit_rows)
        doc["note"] = (f"{cluster.method} has no rule for new points: the label of the nearest of the {fitted} rows "
                       "it was fitted on (each of them gets its own label)" if len(predictor.rows) == fitted else
                       f"{cluster.method} has no rule for new points: the label of the nearest of a uniform sample of "
                       f"{len(predictor.rows)} of the {fitted} rows it was fitted on (an approximation: a fitted row "
                       "outside the sample may get another label than the run gave it)")
    arrays = {f"ref_{name}": np.asarray(v) for name, v in record.items() if isinstance(v, np.ndarray)}
    params = {name: v for name, v in record.items() if not isinstance(v, np.ndarray)}
    if params:
        doc["params"] = params
    return doc, arrays


def reference_predictor(bundle: "Bundle"):
    """The reference clustering's predictor a bundle saved (:mod:`pipeline.cluster_heads`), or None
    when it saved no arrays for it (an encoder head then answers from the inputs alone)."""
    from pipeline.cluster_heads import predictor_from_dict

    ref, a = bundle.doc["reference"], bundle.arrays
    record = {"kind": ref["assign"], **(ref.get("params") or {}),
              **{name[len("ref_"):]: v for name, v in a.items() if name.startswith("ref_")}}
    try:
        return predictor_from_dict(record)
    except InvalidInputError:  # no arrays (the bundle's checks proved those it has valid)
        return None


def _upgrade(doc: dict, arrays: dict) -> None:
    """A bundle of format version 1 or 2 in the form of version 3 (in place): its rule for spectral,
    DBSCAN ... clusters, the nearest cluster mean, becomes the nearest of those means (a
    nearest-row rule over them)."""
    ref = doc["reference"]
    if doc["version"] < 3 and ref["assign"] == "nearest_mean":
        ref["assign"] = "nearest_row"
        if "ref_centers" in arrays:
            arrays["ref_rows"], arrays["ref_labels"] = arrays.pop("ref_centers"), arrays.pop("ref_center_labels")


def _sorted_column(units, column: np.ndarray) -> np.ndarray:
    """``np.sort(column)``, taken from the percentile map of ``units`` (its own or its fallback's
    sorted reference values) when that map was built on this very column."""
    ranks = units if getattr(units, "kind", None) == "percentile" else getattr(units, "fallback", None)
    if ranks is not None and getattr(ranks, "column", None) is not None and len(ranks.column) == len(column) \
            and np.isfinite(column).all() and np.array_equal(ranks.column, column):
        return ranks.values
    return np.sort(column)


def _coordinates(X, sample=None) -> tuple[np.ndarray, tuple]:
    """(the coordinates the rules are printed against, (min, max, std) of every column). Coordinates
    read from disk (latents out of core) are summarised chunk by chunk; the rules are then printed
    against the report's uniform sample of rows (:data:`pipeline.app.report.run_report.SAMPLE_ROWS`;
    ``sample``: those rows, when the report has read them already)."""
    from pipeline.app.data.chunked import held, read_rows, row_ranges

    if held(X) is not None:
        X = np.asarray(X, dtype=np.float64)
        if not len(X):
            return X, (X.min(axis=0), X.max(axis=0), np.ones(X.shape[1]))
        # two passes over 16 MB blocks: np.std widens a temporary of every row (0.85 s for 1M x 20
        # coordinates, against 0.15 s here); the extremes from the block the sum has just read
        step = max(1024, (16 << 20) // (8 * max(X.shape[1], 1)))
        d = X.shape[1]
        total, low, high = np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf)
        for i in range(0, len(X), step):
            block = X[i:i + step]
            total += block.sum(axis=0)
            np.minimum(low, block.min(axis=0), out=low)
            np.maximum(high, block.max(axis=0), out=high)
        mean = total / len(X)
        var = sum(np.square(X[i:i + step] - mean).sum(axis=0) for i in range(0, len(X), step)) / len(X)
        return X, (low, high, np.sqrt(var))
    from pipeline.app.report.run_report import sample_rows_of, sampled_rows

    d = X.shape[1]
    low, high, total, square = np.full(d, np.inf), np.full(d, -np.inf), np.zeros(d), np.zeros(d)
    for start, stop in row_ranges(X, max(1024, (16 << 20) // (8 * max(d, 1)))):  # 16 MB blocks, never widened
        block = np.asarray(read_rows(X, start, stop))
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
        total += block.sum(axis=0, dtype=np.float64)
        square += np.einsum("ij,ij->j", block, block, dtype=np.float64)
    n = len(X)
    std = np.sqrt(np.maximum(square / n - np.square(total / n), 0.0))
    rows = sample_rows_of(n, d)
    if sample is not None and len(sample) == len(rows):
        return sample, (low, high, std)
    return sampled_rows(X, rows), (low, high, std)


def _input_spec(load) -> dict:
    if load.kind == "text":
        return {"kind": "text"}
    X = load.X if hasattr(load.X, "shape") else np.asarray(load.X)  # an array on disk: its header only
    return {"kind": load.kind, "shape": list(X.shape[1:]), "dtype": str(X.dtype),
            "feature_names": list(load.feature_names) if load.feature_names is not None else None,
            # a table standardised for clustering (dataset.standardize): new rows are z-scored alike
            "standardized": (load.meta or {}).get("standardized")}


def _encoder_doc(cfg: dict, train, encode) -> dict:
    from pipeline.app.stores.cache import localize

    enc = dict(cfg["encoder"])
    out = {"name": enc.get("name"), "config": enc, "latent_names": list(encode.latent_names),
           "width": int(encode.Z.shape[1]), "checkpoint": None, "checkpoint_sha256": None,
           "model_used": getattr(train, "model_used", None) if train is not None else None, "weights": None}
    if encode.checkpoint:
        out["checkpoint"] = str(Path(localize(encode.checkpoint, cfg["paths"])).resolve())
        out["checkpoint_portable"] = encode.checkpoint
        out["checkpoint_sha256"] = encode.checkpoint_sha256
    weights = None
    if not encode.checkpoint:  # pretrained weights: the encoder's factory names them (``pretrained_weights``)
        from pipeline.app.configuration.instantiate import locate

        named = getattr(locate(enc["_target_"], "encoder"), "pretrained_weights", None)
        weights = named(enc.get("params") or {}) if named is not None else None
    if weights is not None:
        out["weights"] = weights
    elif out["model_used"]:
        out["weights"] = {"id": out["model_used"], "sha256": None}
    return out


def _same_values(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same rows read the same way: one object, or two views of the
    same files read as the same type (:class:`pipeline.app.data.chunked.ChunkedArray` compares by
    its parts)."""
    from pipeline.app.data.chunked import is_view

    return a is b or (is_view(a) and is_view(b) and a == b)


def bundle_from_run(cfg: dict, done: dict) -> Bundle:
    """The explainer of a finished run from its stage outputs (``done``, as ``run_pipeline`` returns)."""
    import pandas as pd

    from pipeline.concepts.units import units_to_dicts
    from pipeline.trees.tree import ExplanationTree

    load, encode = done["load"].artifact, done["encode"].artifact
    cluster, project = done["cluster"].artifact, done["project"].artifact
    train = done["train"].artifact if "train" in done else None
    report = done["report"].artifact if "report" in done else None
    ref_doc, arrays = _reference(cluster, encode.Z)
    data = getattr(report, "data", None)  # the rows the report annotated, with each tree's reading
    X, (low, high, std) = _coordinates(project.X, data.get("X") if data else None)
    scale = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    arrays.update(feature_min=low, feature_max=high, feature_scale=scale)
    from pipeline.app.explainer.input_drift import training_stats

    inputs = None if load.kind == "text" else load.raw if load.raw is not None else load.X
    stats = training_stats(inputs, "input") if inputs is not None else {}  # what new inputs are compared with
    arrays.update(stats)  # (in the units they are given in)
    if stats and _same_values(encode.Z, inputs):  # the identity encoder on a file: the latents are the inputs
        arrays.update({"latent" + key[len("input"):]: value for key, value in stats.items()})
    else:
        arrays.update(training_stats(encode.Z, "latent"))
    if project.cavs is not None:
        arrays["cavs"] = np.asarray(project.cavs, dtype=np.float64)
    if project.units is not None:  # percentile units, and the percentile fallback of probability units
        def spaced(n: int):  # evenly spaced order statistics: percentiles of new rows within 1e-5
            return np.linspace(0, n - 1, PERCENTILE_ROWS).round().astype(np.int64) if n > PERCENTILE_ROWS else slice(None)

        if sorts_every_column(len(X)):  # each column sorted once: the display maps' own sorted columns
            from concurrent.futures import ThreadPoolExecutor

            keep = spaced(len(X))
            from pipeline.threads import worker_processes

            with ThreadPoolExecutor(max_workers=worker_processes(cfg.get("threads"))) as pool:
                # np.sort releases the GIL: the columns sorted side by side, each thinned before they are stacked
                values = np.column_stack(list(pool.map(lambda m: _sorted_column(project.units[m], X[:, m])[keep],
                                                       range(X.shape[1]))))
        else:  # beyond a million rows: a uniform sample of them
            values = np.sort(X[np.sort(np.random.default_rng(0).choice(len(X), 10 * PERCENTILE_ROWS, replace=False))],
                             axis=0)
            values = values[spaced(len(values))]
        arrays["percentile_values"] = values
    results = report.df if report is not None else pd.DataFrame()
    # the rules' texts leave the leaf annotations out: the rows they are printed against only fill
    # in statistics that are dropped, so a large run prints them against a sample of its rows
    shown = X if len(X) <= 10 * PERCENTILE_ROWS else X[::max(len(X) // PERCENTILE_ROWS, 1)]
    trees, tree_docs = {}, {}
    for name, out in done.items():
        if not name.startswith("fit.") or out.artifact is None:
            continue
        row, fit = name[len("fit."):], out.artifact
        if data and data.get("X") is shown:  # printed exactly as the report printed them
            from pipeline.app.report.run_report import read_tree

            tree, reading = read_tree(fit, data)
        else:
            tree, reading = ExplanationTree.from_dict(fit.tree), None
        trees[row] = tree
        training = {}
        hit = results[results["explainer"] == row] if "explainer" in results.columns else results.iloc[:0]
        if len(hit):
            r = hit.iloc[0]
            training = {k: float(r[k]) for k in ("ari", "ami", "ref_ari", "misassignment") if k in r and pd.notna(r[k])}
            if "misassignment" in training:
                training["agreement"] = 1.0 - training["misassignment"]
        tree_docs[row] = {"method": fit.name, "file": f"trees/{row}.json", "n_leaves": tree.n_leaves,
                          "depth": tree.depth, "rules": rule_texts(tree, shown, project.units, reading),
                          "printed_tests": printed_tests(tree, shown, project.units,
                                                         reading.display if reading is not None else None),
                          "training": training}
    ref_train = {}
    if "explainer" in results.columns and (results["explainer"] == "reference").any():
        r = results[results["explainer"] == "reference"].iloc[0]
        ref_train = {k: float(r[k]) for k in ("ari", "ami") if k in r and pd.notna(r[k])}
    concepts = project.cavs is not None
    doc = {
        "format": FORMAT, "version": VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "packages": package_versions(),
        "run": {"dataset": load.name,
                "n_rows": int(len(project.X)), "class_names": load.class_names, "seed": cfg.get("seed"),
                "clustering": (cfg.get("clustering") or {}).get("name"),
                "concepts": (cfg.get("concepts") or {}).get("name")},
        "input": _input_spec(load),
        "encoder": _encoder_doc(cfg, train, encode),
        "reference": {**ref_doc, "training": ref_train},
        "features": {"names": list(project.feature_names), "space": "concepts" if concepts else "latents",
                     "units": project.units_kind or "raw", "display_units": units_to_dicts(project.units)},
        "trees": tree_docs,
    }
    return Bundle(doc=doc, arrays=arrays, trees=trees)


# ------------------------------------------------------------------ writing
def write_bundle(bundle: Bundle, path: Path, copy_weights: bool = False, checkpoint: Path | None = None) -> Path:
    """Write ``bundle`` to the folder ``path`` (created; must not exist yet) atomically: every file
    into a temporary sibling folder, ``SHA256SUMS`` last, then one rename."""
    from pipeline.app.stores.writing import atomic_write

    path = Path(path)
    if path.exists():
        raise InvalidInputError(f"{path} already exists; a saved explainer is never overwritten. Choose another "
                                "folder or delete that one.")
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    doc = json.loads(json.dumps(bundle.doc, default=_plain))
    arrays = {k: v for k, v in bundle.arrays.items() if k not in DERIVED}
    try:
        tmp.mkdir(parents=True)
        for row, tree in bundle.trees.items():
            atomic_write(tmp / "trees" / f"{row}.json", json.dumps(tree.to_dict(), indent=1))
            # what the reader checks the file against (bundle_checks.check_tree)
            doc["trees"][row].update(file=f"trees/{row}.json", name=row, sha256=tree_digest(tree),
                                     feature_names=None if tree.feature_names is None else list(tree.feature_names))
        buf = io.BytesIO()
        # not compressed: sorted float64 percentile tables shrink by a sixth, for 0.9 s at 1M rows
        np.savez(buf, **arrays)
        atomic_write(tmp / "arrays.npz", buf.getvalue())
        if copy_weights:
            doc["encoder"] = _copy_weights(doc["encoder"], checkpoint, tmp)
        doc.update(version=VERSION, arrays=array_record(arrays))
        doc.pop("content_sha256", None)
        doc["content_sha256"] = content_digest(doc)
        atomic_write(tmp / "explainer.json", json.dumps(doc, indent=1))
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        sums = "".join(f"{file_digest(p)}  {p.relative_to(tmp).as_posix()}\n" for p in files)
        atomic_write(tmp / SUMS, sums)
        for p in [*files, tmp / SUMS]:
            fsync_path(p)
        os.replace(tmp, path)
        fsync_path(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _copy_weights(enc: dict, checkpoint: Path | None, folder: Path) -> dict:
    """The encoder checkpoint (and its JSON sidecar) copied into ``<bundle>/weights/``."""
    src = Path(checkpoint or enc.get("checkpoint") or "")
    if not enc.get("checkpoint"):
        raise InvalidInputError(f"copy_weights=True: the {enc.get('name')} encoder has no checkpoint file to copy (its "
                                "weights are pretrained ones installed with a package, named in explainer.json).")
    if not src.is_file():
        raise InvalidInputError(f"copy_weights=True: the encoder checkpoint {src} is missing, so it cannot be copied.")
    dest = folder / "weights" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    side = src.with_suffix(".json")
    if side.is_file():
        shutil.copyfile(side, dest.with_suffix(".json"))
    if file_digest(dest) != enc.get("checkpoint_sha256"):
        raise InvalidInputError(f"the encoder checkpoint {src} no longer has the sha256 the run recorded "
                                f"({str(enc.get('checkpoint_sha256'))[:12]}...); it was replaced after the run.")
    return {**enc, "copied": f"weights/{src.name}"}


def write_run_bundle(cfg: dict, done: dict, out_dir: Path) -> Path:
    """``<out_dir>/explainer/`` of a finished run (see the module docstring)."""
    return write_bundle(bundle_from_run(cfg, done), Path(out_dir) / "explainer")


# ------------------------------------------------------------------ reading
def bundle_folder(path) -> Path:
    """The bundle folder of ``path``: a run directory (its ``explainer/``) or a bundle folder itself.
    A folder that is neither is one paragraph saying what it is and what to do."""
    path = Path(path).expanduser()
    if (path / "explainer.json").is_file() or (path / SUMS).is_file():
        return path
    if (path / "explainer" / "explainer.json").is_file():
        return path / "explainer"
    if not path.exists():
        raise InvalidInputError(f"{path} does not exist; give a run directory (the folder `python -m pipeline` printed "
                                "after 'results written to') or a saved explainer folder.")
    status = {}
    try:
        status = json.loads((path / "status.json").read_text())
    except (OSError, ValueError):
        pass
    state = status.get("status")
    if state in ("running", "failed", "interrupted"):
        raise InvalidInputError(f"{path} is not a finished run: its status.json says '{state}'"
                                + (f" ({status.get('error')})" if status.get("error") else "")
                                + ". Explain with a run that finished (rerun the command; cached stages are reused).")
    if (path / "results.csv").is_file():
        raise InvalidInputError(f"{path} is a run without a saved explainer (no {path / 'explainer'}): it finished before "
                                "explainers were saved, or it was a chunked run (dataset.chunk_rows), which does not "
                                "save one yet. Rerun the same command with this version (its cached stages are "
                                "reused, so this is quick) and explain with the new run directory.")
    raise InvalidInputError(f"{path} is neither a finished run directory (no results.csv, no explainer/) nor a saved "
                            "explainer folder (no explainer.json). Give the directory `python -m pipeline` printed "
                            "after 'results written to', or a folder written by ConceptExplainer.save.")


def verify_checksums(folder: Path) -> None:
    """Every file ``SHA256SUMS`` lists is inside the bundle, exists and has its sha256, and every
    file of the folder is listed (:func:`pipeline.app.explainer.bundle_checks.verify_files`)."""
    from pipeline.app.explainer.bundle_checks import verify_files

    verify_files(Path(folder))


def version_differences(saved: dict) -> list[str]:
    """``'scikit-learn 1.5.0 when saved, 1.6.1 here'`` for every package whose version differs."""
    here = package_versions()
    return [f"{name} {saved[name]} when saved, {here.get(name, 'not installed')} here"
            for name in sorted(saved) if saved.get(name) != here.get(name) and (name in here or name != "torch")]


def read_bundle(path) -> Bundle:
    """Read and verify the bundle at ``path`` (a run directory or a bundle folder): its files,
    ``explainer.json``, arrays and trees are checked against each other before any is used
    (:mod:`pipeline.app.explainer.bundle_checks`)."""
    folder = bundle_folder(path)
    doc, arrays, trees = verify_bundle(folder.resolve(), VERSION)
    _upgrade(doc, arrays)
    diffs = version_differences(doc.get("packages") or {})
    if diffs:
        log.warning("the explainer in %s was saved with other package versions (%s): it loads, but the encoder's "
                    "latents may differ in the last bits, which can move points lying on a cut", folder,
                    "; ".join(diffs))
    return Bundle(doc=doc, arrays=arrays, trees=trees, path=folder)


__all__ = ["Bundle", "bundle_folder", "bundle_from_run", "package_versions", "read_bundle", "rule_texts",
           "verify_checksums", "write_bundle", "write_run_bundle"]
