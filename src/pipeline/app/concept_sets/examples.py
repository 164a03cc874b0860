"""``concepts=examples``: a user's own concept examples, read into :class:`ConceptExamples`.

``path`` is one of

- a table (CSV / TSV / parquet) with one 0/1 column per concept, one row per dataset row in the
  dataset's order, or joined on ``id_column`` (matched against the dataset's ids: the
  ``dataset.id_column`` values, the file names of a folder dataset, else the row numbers 0..n-1);
  empty cells mean "unknown" for that row;
- a folder with one subfolder per concept holding example files (images or ``.txt`` documents)
  and a ``random/`` subfolder of negatives (the TCAV / captum layout); the examples are embedded
  by the run's own encoder;
- an ``.npz`` of precomputed concept-example embeddings: one array (k, m) per concept (its
  positives) and ``random`` (the negatives), in the latent space of the data.

In the last two layouts concept ``c``'s CAV separates ``c``'s examples from ``random``'s.
:func:`examples` is the ``_target_`` of ``conf/concepts/examples.yaml``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.app.data import readers as r
from pipeline.concepts.sets import ConceptExamples, provenance, row_provenance
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

KINDS = ("a table (.csv, .tsv, .parquet) with one 0/1 column per concept, a folder with one subfolder of examples "
         "per concept plus random/, or an .npz of concept-example embeddings (one array per concept plus 'random')")
NEGATIVES = "random"


def read_concept_examples(path, dataset, *, id_column: str | None = None, name: str | None = None,
                          key: str = "concepts.path") -> ConceptExamples:
    """Concept examples from ``path`` for ``dataset`` (a :class:`pipeline.app.data.Dataset`)."""
    p = r.existing_path(path, key, KINDS)
    name = name or p.stem
    if p.is_dir():
        return _folder(p, dataset, name, key)
    s = r.suffix(p)
    if s == ".npz":
        return _embeddings(p, name, key)
    if s in r.TABLE_SUFFIXES:
        return _table(p, dataset, name, key, id_column)
    raise InvalidInputError(f"{key}={p}: unknown file type {s or '(no extension)'!r}; concepts=examples reads {KINDS}.")


def _binary(df: pd.DataFrame, p: Path, key: str) -> np.ndarray:
    """The table's columns as a float matrix of 1 / 0 / NaN (unknown); anything else is an error."""
    out = np.full(df.shape, np.nan)
    for j, c in enumerate(df.columns):
        col = df[c]
        if col.dtype == bool:
            out[:, j] = col.to_numpy(dtype=float)
            continue
        text = col.astype(str).str.strip().str.lower()
        mapped = text.map({"1": 1.0, "0": 0.0, "1.0": 1.0, "0.0": 0.0, "true": 1.0, "false": 0.0})
        blank = col.isna() | text.isin(["", "nan", "none"])
        wrong = mapped.isna() & ~blank
        if wrong.any():
            row = int(np.flatnonzero(wrong.to_numpy())[0])
            raise InvalidInputError(
                f"{key}={p}: column {c!r} holds {str(col.iloc[row])!r} in row {row} (line {row + 2} of the file); "
                "concept columns hold 1 (concept present), 0 (absent) or nothing (unknown). Fix the values, or name "
                "a column of ids with concepts.id_column=<name>.")
        out[:, j] = mapped.to_numpy(dtype=float)
    return out


def _table(p: Path, dataset, name: str, key: str, id_column) -> ConceptExamples:
    df = r.drop_unnamed(r.read_table(p, key), p)
    n = len(dataset)
    rows = np.asarray(dataset.meta.get("rows", np.arange(n)))  # dataset rows in the original file's numbering
    if id_column:
        if id_column not in df.columns:
            raise InvalidInputError(f"concepts.id_column={id_column!r} is not a column of {p}; its columns are "
                                    f"{list(df.columns)}.")
        ids = dataset.meta.get("ids")
        ids = [str(i) for i in (ids if ids is not None else rows)]
        table_ids = df[id_column].astype(str).str.strip()
        dup = table_ids[table_ids.duplicated()]
        if len(dup):
            raise InvalidInputError(f"{p}: id {dup.iloc[0]!r} occurs more than once in column {id_column!r}; ids "
                                    "must be unique.")
        labels_tab = _binary(df.drop(columns=[id_column]), p, key)
        where = pd.Series(np.arange(len(df)), index=table_ids.to_numpy())
        pos = where.reindex(ids).to_numpy()
        found = ~np.isnan(pos)
        if not found.any():
            raise InvalidInputError(
                f"{p}: none of the ids in column {id_column!r} (e.g. {table_ids.iloc[0]!r}) matches a dataset row "
                f"(e.g. {ids[0]!r}). The dataset's ids are its dataset.id_column values, a folder's file names "
                "relative to the folder, or else the row numbers 0..n-1.")
        if not found.all():
            log.warning("%s: %d of %d dataset rows have no row in the concept table (unknown for every concept)",
                        p, int((~found).sum()), n)
        labels = np.full((n, labels_tab.shape[1]), np.nan)
        labels[found] = labels_tab[pos[found].astype(int)]
        names = [c for c in df.columns if c != id_column]
    else:
        n_full = int(dataset.meta.get("n_rows", n))
        if len(df) != n_full:
            raise InvalidInputError(
                f"{key}={p} has {len(df)} rows but the dataset has {n_full}; the concept table needs one row per "
                "dataset row in the same order, or a column of ids to join on (concepts.id_column=<name>).")
        labels = _binary(df, p, key)[rows]
        names = list(df.columns)
    _check_both_classes(labels, names, p)
    unit = {"image": "images", "text": "texts"}.get(dataset.kind, "rows")
    return ConceptExamples(name, names, labels, meta={
        "source": str(p), "layout": "table",
        "provenance": row_provenance(labels, names, dataset.y, dataset.class_names, unit)})


def _check_both_classes(labels: np.ndarray, names: list[str], p: Path) -> None:
    for j, c in enumerate(names):
        col = labels[:, j]
        for value, what in ((1, "positives (rows with 1)"), (0, "negatives (rows with 0)")):
            if not (col == value).any():
                raise InvalidInputError(f"{p}: concept {c!r} has no {what} among the dataset's rows; a CAV needs "
                                        "both. Add examples or remove the column.")


def _folder(p: Path, dataset, name: str, key: str) -> ConceptExamples:
    subdirs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not (p / NEGATIVES).is_dir():
        raise InvalidInputError(
            f"{key}={p} has no {NEGATIVES}/ subfolder; the concept-folder layout is <folder>/<concept>/* (examples of "
            f"each concept) plus <folder>/{NEGATIVES}/* (counter-examples: random inputs without the concepts). "
            f"Add {p / NEGATIVES} with a few dozen random examples.")
    concepts = [d for d in subdirs if d.name != NEGATIVES]
    if not concepts:
        raise InvalidInputError(f"{key}={p} has no concept subfolders besides {NEGATIVES}/; add one subfolder of "
                                "examples per concept.")
    wanted = r.IMAGE_SUFFIXES + r.TEXT_SUFFIXES
    groups = [(d.name, r.list_files(d, wanted)) for d in concepts + [p / NEGATIVES]]
    for folder, files in groups:
        if not files:
            what = "negatives" if folder == NEGATIVES else "positives"
            raise InvalidInputError(f"{key}: {p / folder} holds no images or .txt documents, so concept "
                                    f"{folder!r} has no {what}; add example files.")
    files = [f for _, files in groups for f in files]
    kinds = {"text" if r.suffix(f) in r.TEXT_SUFFIXES else "image" for f in files}
    if len(kinds) > 1:
        raise InvalidInputError(f"{key}={p} mixes images and .txt documents; concept examples must be of the "
                                "data's kind.")
    kind = kinds.pop()
    if kind != dataset.kind and not (kind == "image" and dataset.kind == "image"):
        raise InvalidInputError(f"{key}={p} holds {kind} examples but the dataset is {dataset.kind}; the examples "
                                "are embedded by the data's encoder, so they must be of the same kind.")
    if kind == "image":
        X = np.asarray(dataset.X)
        inputs = r.read_images(files, key, size=X.shape[1:3], channels=X.shape[3])
    else:
        inputs = r.read_documents(files, key)
    names = [d.name for d in concepts]
    labels = np.full((len(files), len(names)), np.nan)
    start = 0
    for m, (_, group) in enumerate(groups):
        if m < len(names):
            labels[start:start + len(group), m] = 1.0
        else:
            labels[start:, :] = 0.0
        start += len(group)
    log.info("%s: %d concepts, %d examples, %d random", p, len(names), len(files) - len(groups[-1][1]),
             len(groups[-1][1]))
    n_neg = len(groups[-1][1])
    prov = {n: provenance(f"{len(group)} files in {p.name}/{n}/", f"{n_neg} files in {p.name}/{NEGATIVES}/")
            for n, (_, group) in zip(names, groups)}
    return ConceptExamples(name, names, labels, inputs=inputs, input_kind=kind,
                           meta={"source": str(p), "layout": "folder", "provenance": prov})


def _embeddings(p: Path, name: str, key: str) -> ConceptExamples:
    arrays = r.read_array_file(p, key)
    if NEGATIVES not in arrays:
        raise InvalidInputError(f"{key}={p} has arrays {sorted(arrays)} but no {NEGATIVES!r} array of negatives; "
                                f"save one with np.savez(..., {NEGATIVES}=<(k, m) embeddings of random inputs>).")
    names = [k for k in arrays if k != NEGATIVES]
    if not names:
        raise InvalidInputError(f"{key}={p} holds only {NEGATIVES!r}; add one array of positives per concept.")
    widths = {k: (v.shape[1] if v.ndim == 2 else None) for k, v in arrays.items()}
    bad = [k for k, w in widths.items() if w is None or arrays[k].dtype.kind not in "fiu"]
    if bad:
        raise InvalidInputError(f"{key}={p}: arrays {bad} are not numeric 2-D (k, m) embeddings.")
    if len(set(widths.values())) > 1:
        raise InvalidInputError(f"{key}={p}: the arrays have different widths {widths}; all must be embeddings of "
                                "the same space.")
    for k, v in arrays.items():
        if len(v) == 0:
            what = "negatives" if k == NEGATIVES else "positives"
            raise InvalidInputError(f"{key}={p}: array {k!r} is empty, so it gives no {what}.")
        row = r.first_bad_row(v.astype(np.float64))
        if row is not None:
            raise InvalidInputError(f"{key}={p}: array {k!r} holds NaN/inf in row {row}; remove those rows.")
    Z = np.concatenate([arrays[k] for k in names + [NEGATIVES]]).astype(np.float32)
    labels = np.full((len(Z), len(names)), np.nan)
    start = 0
    for m, k in enumerate(names):
        labels[start:start + len(arrays[k]), m] = 1.0
        start += len(arrays[k])
    labels[start:] = 0.0
    prov = {k: provenance(f"{len(arrays[k])} embeddings {k!r} in {p.name}",
                          f"{len(arrays[NEGATIVES])} embeddings {NEGATIVES!r} in {p.name}") for k in names}
    return ConceptExamples(name, names, labels, inputs=Z, input_kind="latents",
                           meta={"source": str(p), "layout": "embeddings", "provenance": prov})


def examples(dataset, path=None, id_column: str | None = None, set_name: str | None = None,
             fingerprint=None) -> ConceptExamples:
    """``concepts=examples``: the concept source reading ``concepts.path`` (``fingerprint`` only
    keys the cache on the file's size and modification time)."""
    return read_concept_examples(path, dataset, id_column=id_column, name=set_name)
