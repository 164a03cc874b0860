"""``dataset=files``: a user's own features, embeddings, table, images or texts.

``path`` is one of

- an array: ``.npy`` of shape (n, d) (features or precomputed embeddings; a uint8
  (n, H, W[, C]) array is taken as images), or ``.npz`` of named arrays (the features under
  ``array``, default ``X`` / ``embeddings`` / the only 2-D array; labels may name another array);
- a table: ``.csv`` / ``.tsv`` (header row) or ``.parquet``; numeric columns are the features,
  named by the header;
- a ``.txt`` file, one document per line (texts for SBERT / CLIP text), or a table column
  ``text_column``;
- a folder in ImageFolder layout: one subfolder per class (the subfolder names are the labels)
  or a flat folder without labels; images or ``.txt`` documents.

Labels are optional: ``labels`` is a column of the table, an array of the ``.npz``, or a file
(one label per line, ``.npy``, or a table with ``label_column``). Any values work (strings
too); they are coded 0..C-1 in sorted order and their values become the class names. No value
is noise unless ``noise_label`` says so; missing values are unknown.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.app.data import readers as r
from pipeline.app.data.dataset import Dataset, reads
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

KINDS = ("an array (.npy, .npz), a table (.csv, .tsv, .parquet), a .txt file with one document per line, or a "
         "folder of images / .txt documents (one subfolder per class for labels)")
_ARRAY_KEYS = ("X", "x", "embeddings", "features", "data")


def load_files(path, labels=None, *, feature_names=None, text_column: str | None = None, label_column=None,
               id_column: str | None = None, noise_label=None, array: str | None = None, image_size=None,
               name: str | None = None, key: str = "dataset.path", ids=None) -> Dataset:
    """A :class:`Dataset` from a user's file or folder (see the module docstring).

    Parameters
    ----------
    path : str or Path
    labels : str, optional
        A column of the table, an array of the ``.npz``, or a label file.
    feature_names : list of str, optional
        Names of the ``d`` features of an array; for a table, the columns to use (or new
        names for all feature columns).
    text_column : str, optional
        The table column holding documents: the dataset is then text.
    label_column : str, optional
        The column of a label *table* given as ``labels``.
    id_column : str, optional
        A table column of row ids (kept out of the features; ``concepts.id_column`` joins on it).
    noise_label : optional
        The label value that marks noise points (coded -1).
    ids : str, optional
        A 1-D array file (``.npy``, shards, zarr) of row ids of an array dataset
        (``concepts.id_column`` joins on them; they name the rows of ``assignments.parquet``).
    array : str, optional
        Name of the features array in an ``.npz``.
    image_size : int, optional
        Resize images to this side (default: their own size, the most common one if they differ).
    name : str, optional
        Dataset name in reports (default: the file's stem).
    """
    ids_file = ids  # (a table's own id column is read into ``ids`` below)
    p = r.existing_path(path, key, KINDS)
    name = name or p.stem
    meta = {"source": str(p.resolve())}
    if is_array_source(p):
        ds = _view(p, labels, feature_names, noise_label, name, meta, key)
        return _with_ids(ds, ids_file)
    if p.is_dir():
        return _folder(p, labels, name, meta, key, image_size, noise_label, label_column)
    s = r.suffix(p)
    table = None
    if s in r.ARRAY_SUFFIXES:
        X, values, fnames, kind = _array(p, key, labels, array)
    elif s in r.TABLE_SUFFIXES:
        table = r.drop_unnamed(r.read_table(p, key), p)
        X, values, fnames, kind, ids = _table(p, table, key, labels, text_column, id_column, feature_names)
        meta["table"] = True  # columns in their own units: standardised for clustering by default
        if ids is not None:
            meta["ids"] = ids
    elif s in r.TEXT_SUFFIXES:
        X, values, fnames, kind = r.read_lines(p, key), None, None, "text"
    else:
        raise InvalidInputError(f"{key}={p}: unknown file type {s or '(no extension)'!r}; dataset=files reads {KINDS}.")
    if kind == "tabular":
        fnames = _feature_names(fnames, feature_names, X.shape[1], p, key, table is not None)
    y, class_names = None, None
    if values is None and labels is not None:
        values = _label_values(labels, len(X), p, key, table, label_column)
    if values is not None:
        y, class_names = r.encode_labels(values, f"the labels of {p.name}", noise_label)
        meta["labels"] = str(labels)
    return _with_ids(Dataset(name=name, X=X, y=y, kind=kind, feature_names=fnames, class_names=class_names, meta=meta),
                     ids_file)


def is_array_source(path) -> bool:
    """True for the arrays a run reads by row range instead of loading (docs/out-of-core.md): a
    2-D ``.npy``, a folder of ``.npy`` / ``.parquet`` shards, a zarr array."""
    from pipeline.app.data.chunked import _is_zarr

    p = Path(str(path)).expanduser()
    if p.is_dir():
        if _is_zarr(p):
            return True
        try:
            names = [f for f in p.iterdir() if not f.name.startswith(".")]
        except OSError:
            return False
        from pipeline.app.data.chunked import MANIFEST, SHARD_SUFFIXES

        shards = [f for f in names if f.name != MANIFEST]  # a manifest gives the shards' order
        return bool(shards) and all(f.is_file() and f.suffix.lower() in SHARD_SUFFIXES for f in shards)
    if p.suffix.lower() != ".npy" or not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            shape, _, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)(fh)
    except (ValueError, OSError):
        return False  # read (and reported) the usual way
    return len(shape) == 2 and dtype.kind == "f"  # embeddings / features (integer arrays are read whole, as tables)


CHECK_WHOLE_BYTES = 256 * 2**20


def _with_ids(ds: Dataset, ids) -> Dataset:
    if ids is None:
        return ds
    from pipeline.app.data.chunked import open_chunked

    values = open_chunked(ids, "dataset.ids", vector=True)
    if values.n_rows != len(ds):
        raise InvalidInputError(f"dataset.ids={ids} holds {values.n_rows} ids but dataset.path holds {len(ds)} rows; "
                                "give one id per row (in the same order).")
    ds.meta["ids"] = [str(v) for v in values.read(0, values.n_rows).tolist()]
    return ds


def _view(p: Path, labels, feature_names, noise_label, name: str, meta: dict, key: str) -> Dataset:
    """An array on disk as a :class:`pipeline.app.data.chunked.ChunkedArray`: nothing but its header
    is read here; the stages read it by row range (its values are checked as they are read)."""
    from pipeline.app.data.chunked import open_chunked

    X = open_chunked(p, key)
    if X.dtype.kind not in "fiu":
        raise InvalidInputError(f"{key}={p} holds {X.dtype} values; features must be numeric.")
    if X.nbytes <= CHECK_WHOLE_BYTES:  # small enough to check now; larger arrays are checked as they are read
        r.check_finite_rows(X.read(0, X.n_rows), p, key)
    fnames = _feature_names(None, feature_names, X.shape[1], p, key, False)
    y = class_names = None
    if labels is not None:
        values = _label_values(labels, X.n_rows, p, key, None, None)
        y, class_names = r.encode_labels(values, f"the labels of {p.name}", noise_label)
        meta["labels"] = str(labels)
    meta["n_rows"] = X.n_rows
    log.info("%s: %d x %d %s, read by row range", p, X.n_rows, X.shape[1], X.dtype)
    return Dataset(name=name, X=X, y=y, kind="tabular", feature_names=fnames, class_names=class_names, meta=meta)


def _array(p: Path, key: str, labels, array):
    loaded = r.read_array_file(p, key)
    values = fnames = None
    if isinstance(loaded, dict):
        names = {k: v for k, v in loaded.items()}
        chosen = array or next((k for k in _ARRAY_KEYS if k in names), None)
        if chosen is None:
            two_d = [k for k, v in names.items() if v.ndim >= 2]
            if len(two_d) != 1:
                raise InvalidInputError(f"{key}={p} holds arrays {sorted(names)}; say which are the features with "
                                        "dataset.array=<name>.")
            chosen = two_d[0]
        if chosen not in names:
            raise InvalidInputError(f"dataset.array={chosen!r} is not in {p}; its arrays are {sorted(names)}.")
        X = names[chosen]
        if labels is not None and str(labels) in names:
            values = names[str(labels)]
            if len(values) != len(X):
                raise InvalidInputError(f"{p}: array {labels!r} has {len(values)} labels but {chosen!r} has {len(X)} "
                                        "rows; they must match.")
        if "feature_names" in names:
            fnames = [str(v) for v in names["feature_names"]]
    else:
        X = loaded
    if X.dtype == np.uint8 and X.ndim in (3, 4):
        return (X[..., None] if X.ndim == 3 else X), values, None, "image"
    if X.ndim != 2 or X.dtype.kind not in "fiub":
        raise InvalidInputError(f"{key}={p} holds a {X.dtype} array of shape {X.shape}; features must be a numeric "
                                "2-D array (n_samples, n_features) (or uint8 (n, H, W[, C]) images).")
    X = X.astype(np.float64)
    r.check_finite_rows(X, p, key)
    return X, values, fnames, "tabular"


def _table(p: Path, df, key, labels, text_column, id_column, feature_names):
    exclude = [c for c in (id_column,) if c]
    for what, col in (("dataset.id_column", id_column), ("dataset.text_column", text_column)):
        if col and col not in df.columns:
            raise InvalidInputError(f"{what}={col!r} is not a column of {p}; its columns are {list(df.columns)}.")
    values = None
    if labels is not None and str(labels) not in df.columns and not Path(str(labels)).expanduser().is_file():
        _label_values(labels, len(df), p, key, df, None)  # raises: neither a column nor a file
    if labels is not None and str(labels) in df.columns:
        values = df[str(labels)].to_numpy()
        exclude.append(str(labels))
    ids = [str(v) for v in df[id_column]] if id_column else None
    if text_column:
        texts = df[text_column]
        empty = texts.isna() | (texts.astype(str).str.strip() == "")
        if empty.any():
            row = int(np.flatnonzero(empty.to_numpy())[0])
            raise InvalidInputError(f"{p}: column {text_column!r} is empty in row {row} (line {row + 2}); every "
                                    "row needs a document. Remove those rows.")
        return [str(t) for t in texts], values, None, "text", ids
    if r.headerless(df) and r.suffix(p) in (".csv", ".tsv"):
        import pandas as pd

        df = pd.read_csv(p, sep="\t" if r.suffix(p) == ".tsv" else ",", header=None)
        df.columns = [f"x{j}" for j in range(df.shape[1])]
        log.info("%s has no header row; features named x0..x%d (dataset.feature_names=[...] names them)", p,
                 df.shape[1] - 1)
        if labels is not None and values is None and not Path(str(labels)).exists():
            raise InvalidInputError(f"dataset.labels={labels!r}: {p} has no header row, so it has no named columns; "
                                    "add a header row or give the labels as a file.")
    if feature_names and all(str(f) in df.columns for f in feature_names):
        df = df[[str(f) for f in feature_names]]
        exclude = []
    X, names = r.numeric_columns(df, p, key, exclude)
    r.check_finite_rows(X, p, key, header_rows=1)
    return X, values, names, "tabular", ids


def _feature_names(found, given, d: int, p: Path, key: str, is_table: bool) -> list[str]:
    if given:
        given = [str(g) for g in given]
        if is_table and given == found:
            return found
        if len(given) != d:
            what = "feature columns" if is_table else "columns"
            raise InvalidInputError(f"dataset.feature_names has {len(given)} names but {p} has {d} {what}; give one "
                                    "name per feature" + (" (or a subset of the table's column names)." if is_table
                                                          else "."))
        return given
    return found if found and len(found) == d else [f"x{j}" for j in range(d)]


def _label_values(labels, n: int, p: Path, key: str, table, label_column):
    lp = Path(str(labels)).expanduser()
    if not lp.is_file():
        if table is None:
            raise InvalidInputError(
                f"dataset.labels={labels}: no such file (relative paths are read from the launch directory "
                f"{Path.cwd()}). Give a file with one label per line (.txt/.csv), a 1-D .npy, or a table with "
                "dataset.label_column=<name>.")
        raise InvalidInputError(f"dataset.labels={labels!r} is neither a label file nor a column of {p}; its columns "
                                f"are {list(table.columns)}. Give the name of an existing column, or a file with one "
                                "label per line (.txt/.csv/.npy).")
    values = r.read_label_file(lp, "dataset.labels", label_column)
    return r.align_labels(values, n, lp, "dataset.labels")


def _folder(p: Path, labels, name, meta, key, image_size, noise_label, label_column) -> Dataset:
    files, classes, kind = r.folder_layout(p, key)
    X = r.read_images(files, key, image_size) if kind == "image" else r.read_documents(files, key)
    meta["ids"] = [str(f.relative_to(p)) for f in files]
    values = np.asarray(classes, dtype=object) if classes is not None else None
    if labels is not None:
        if values is not None:
            log.info("%s: dataset.labels=%s replaces the class subfolders as labels", p, labels)
        values = _label_values(labels, len(files), p, key, None, label_column)
    y = class_names = None
    if values is not None:
        y, class_names = r.encode_labels(values, f"the labels of {p.name}", noise_label)
    log.info("%s: %d %s files%s", p, len(files), kind, f" in {len(class_names)} classes" if class_names else "")
    return Dataset(name=name, X=X, y=y, kind=kind, class_names=class_names, meta=meta,
                   feature_names=None)


@reads()
def load_from_config(spec: dict, paths: dict, random_state: int = 0, fingerprints=None, **params) -> Dataset:
    """``dataset=files``: :func:`load_files` with the ``dataset.params`` (which refer to the
    user-facing keys ``dataset.path``, ``dataset.labels``, ...; ``fingerprints`` only keys the
    cache on the files' sizes and modification times)."""
    name = params.pop("name", None) or spec.get("name")
    return load_files(**params, name=None if name in (None, "", "files") else name)


load_from_config.reads_by_row_range = is_array_source  # the paths a run reads by row range (not loaded)
