"""Reading a user's own files: tables, arrays, label lists, image and text folders.

Shared by the ``dataset=files`` loader (:mod:`pipeline.app.data.files`) and the
``concepts=examples`` concept source. Every failure is an :class:`InvalidInputError` of one
paragraph naming the file (and row / column) and the fix. Nothing here writes files.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")
ARRAY_SUFFIXES = (".npy", ".npz")
TEXT_SUFFIXES = (".txt",)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def existing_path(path, key: str, kinds: str) -> Path:
    """``path`` as a Path that exists; else an error naming the config ``key`` and what it may be."""
    if path is None or str(path).strip() in ("", "???"):
        raise InvalidInputError(f"{key} is not set; give it a file or folder: {kinds}.")
    p = Path(str(path)).expanduser()
    if not p.exists():
        where = "" if p.is_absolute() else f" (relative paths are read from the launch directory {Path.cwd()})"
        raise InvalidInputError(f"{key}={path}: no such file or folder{where}. Fix the path; {key} takes {kinds}.")
    return p


def suffix(path: Path) -> str:
    return path.suffix.lower()


def read_table(path: Path, key: str) -> pd.DataFrame:
    """A CSV / TSV / parquet file as a DataFrame; the first row of a CSV is its header."""
    s = suffix(path)
    try:
        if s in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, sep="\t" if s == ".tsv" else ",")
    except ImportError as exc:
        raise InvalidInputError(f"{key}={path}: reading parquet needs pyarrow ({exc}); pip install pyarrow, "
                                "or save the table as CSV.") from None
    except Exception as exc:  # noqa: BLE001 - pandas raises many types for unreadable files
        raise InvalidInputError(f"{key}={path} could not be read as a {s[1:]} table ({type(exc).__name__}: {exc}). "
                                "Check the file is a valid table with a header row.") from None
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise InvalidInputError(f"{key}={path} is an empty table ({df.shape[0]} rows, {df.shape[1]} columns); "
                                "it needs a header row and one row per sample.")
    df.columns = [str(c) for c in df.columns]
    return df


def drop_unnamed(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Columns without a header (``Unnamed: 0``: the row index pandas writes by default) are not
    data; they are dropped with a warning instead of becoming a feature or a concept."""
    unnamed = [c for c in df.columns if re.fullmatch(r"Unnamed: \d+", c)]
    if unnamed:
        log.warning("%s: column(s) without a header %s ignored (a saved row index?); give them a name to use them",
                    path, unnamed)
    return df.drop(columns=unnamed)


def headerless(df: pd.DataFrame) -> bool:
    """True when a CSV's "header" is really a data row (every column name parses as a number)."""
    def number(s):
        try:
            float(s)
            return True
        except ValueError:
            return False
    return all(number(c) for c in df.columns)


def read_array_file(path: Path, key: str):
    """An ``.npy`` array or an ``.npz`` archive (dict of named arrays), without pickles."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001
        raise InvalidInputError(f"{key}={path} could not be read as a numpy {suffix(path)} file "
                                f"({type(exc).__name__}: {exc}). Save it with np.save / np.savez "
                                "(numeric or string arrays, no Python objects).") from None
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        return {k: loaded[k] for k in loaded.files}


def first_bad_row(X: np.ndarray) -> int | None:
    """Index of the first row holding NaN or inf, or None."""
    bad = ~np.isfinite(X)
    if not bad.any():
        return None
    return int(np.flatnonzero(bad.any(axis=1))[0])


def numeric_columns(df: pd.DataFrame, path: Path, key: str, exclude=()) -> tuple[np.ndarray, list[str]]:
    """The table's columns other than ``exclude`` as a float64 matrix plus their names.

    A non-numeric column is an error naming it and its first non-number value.
    """
    cols = [c for c in df.columns if c not in exclude]
    if not cols:
        raise InvalidInputError(f"{key}={path} has no feature columns besides {list(exclude)}.")
    for c in cols:
        values = pd.to_numeric(df[c], errors="coerce")
        wrong = values.isna() & df[c].notna()
        if wrong.any():
            row = int(np.flatnonzero(wrong.to_numpy())[0])
            raise InvalidInputError(
                f"{key}={path}: column {c!r} is not numeric (row {row}, line {row + 2} of the file: "
                f"{str(df[c].iloc[row])!r}). Feature columns must be numbers; if it holds the labels set "
                f"dataset.labels={c}, if it holds ids set dataset.id_column={c}, otherwise remove the column.")
    return df[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64), cols


def check_finite_rows(X: np.ndarray, path: Path, key: str, header_rows: int = 0) -> None:
    """Error naming the first row with NaN/inf (and its file line when the file is a table)."""
    row = first_bad_row(X)
    if row is None:
        return
    n_bad = int((~np.isfinite(X)).any(axis=1).sum())
    line = f" (line {row + 1 + header_rows} of the file)" if header_rows else ""
    raise InvalidInputError(f"{key}={path}: {n_bad} row(s) hold NaN, inf or empty values; the first is row {row} "
                            f"(0-based){line}. Remove or impute those rows before running (the file is not "
                            "modified here).")


# --------------------------------------------------------------------------------------- labels

def encode_labels(values, source: str, noise_label=None) -> tuple[np.ndarray, list[str]]:
    """Any label values (strings, ints, floats) -> int64 codes 0..C-1 and the class names.

    Missing values (NaN, empty strings) become -1 (unknown). Only ``noise_label`` (when given)
    also maps to -1; no value is noise implicitly. Numeric labels are ordered numerically,
    others alphabetically.
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iu" and arr.ndim == 1 and noise_label is None:
        # integer labels (a .npy of millions): the same codes and names without a Python object per row
        classes, codes = np.unique(arr, return_inverse=True)
        return codes.astype(np.int64).reshape(-1), [str(int(c)) for c in classes]
    s = pd.Series(np.asarray(values, dtype=object).ravel())
    missing = s.isna() | (s.astype(str).str.strip() == "")
    numeric = pd.to_numeric(s[~missing], errors="coerce")
    is_numeric = bool(len(numeric)) and not numeric.isna().any()
    if is_numeric:
        num = numeric.to_numpy(dtype=np.float64)
        keys = [int(v) if float(v).is_integer() else float(v) for v in num]
    else:
        keys = [str(v).strip() for v in s[~missing]]
    full = np.empty(len(s), dtype=object)
    full[~missing.to_numpy()] = keys
    noise = np.zeros(len(s), bool)
    if noise_label is not None:
        target = _label_key(noise_label, is_numeric)
        noise = np.array([not m and k == target for k, m in zip(full, missing)])
        if not noise.any():
            log.warning("dataset.noise_label=%r does not occur in %s", noise_label, source)
    known = ~missing.to_numpy() & ~noise
    classes = sorted(set(full[known].tolist()))
    if not classes:
        raise InvalidInputError(f"{source} holds no labels (every value is missing or the noise label); drop "
                                "dataset.labels to run without labels.")
    index = {c: i for i, c in enumerate(classes)}
    y = np.full(len(s), -1, dtype=np.int64)
    y[known] = [index[k] for k in full[known]]
    if missing.any():
        log.warning("%s: %d missing label(s) count as unknown (first at row %d)", source, int(missing.sum()),
                    int(np.flatnonzero(missing.to_numpy())[0]))
    return y, [str(c) for c in classes]


def _label_key(value, numeric: bool):
    if numeric:
        try:
            v = float(value)
            return int(v) if v.is_integer() else v
        except (TypeError, ValueError):
            return value
    return str(value).strip()


def read_label_file(path: Path, key: str, column: str | None = None) -> np.ndarray:
    """Label values from a file: ``.npy`` (1-D), a one-column text/CSV file (one label per line,
    an optional header line), or a table (``column``, or its only column)."""
    s = suffix(path)
    if s == ".npy":
        arr = read_array_file(path, key)
        if arr.ndim != 1:
            raise InvalidInputError(f"{key}={path} has shape {arr.shape}; labels must be a 1-D array (one per row).")
        return arr
    if s == ".parquet" or s == ".pq" or (s in (".csv", ".tsv") and _is_multi_column(path, s)):
        df = read_table(path, key)
        if column is None and df.shape[1] == 1:
            column = df.columns[0]
        if column not in df.columns:
            raise InvalidInputError(f"{key}={path} has columns {list(df.columns)}; say which holds the labels with "
                                    "dataset.label_column=<name>, or give a file with one label per line.")
        return df[column].to_numpy()
    if s not in (".csv", ".tsv", ".txt", ""):
        raise InvalidInputError(f"{key}={path}: unknown label file type {s!r}; use .txt/.csv (one label per line), "
                                ".npy (1-D array) or a .csv/.parquet table with dataset.label_column=<name>.")
    lines = _text_lines(path, key, "text ({exc}); one label per line, UTF-8.")
    quoted = s == ".csv" or s == ".tsv"
    return np.asarray([_unquote(ln.strip()) if quoted else ln.strip() for ln in lines], dtype=object)


def _text_lines(path: Path, key: str, what: str) -> list[str]:
    """The lines of a UTF-8 text file without its trailing blank lines; unreadable: an error
    "could not be read as <what>" (``what`` may use ``{exc}``)."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # -sig: a spreadsheet's byte-order mark
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{key}={path} could not be read as " + what.format(exc=exc)) from None
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _unquote(value: str) -> str:
    return value[1:-1].replace('""', '"') if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _is_multi_column(path: Path, s: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    return ("\t" if s == ".tsv" else ",") in first


def align_labels(values: np.ndarray, n: int, path: Path, key: str) -> np.ndarray:
    """Labels of exactly ``n`` rows; a text file with ``n + 1`` lines has a header line."""
    header = len(values) == n + 1 and str(values[0]) not in {str(v) for v in values[1:]}
    if header and path is not None and suffix(path) in (".csv", ".tsv", ".txt", ""):
        log.info("%s: first line %r taken as a header (it is no label of any row)", path, values[0])
        return values[1:]
    if len(values) != n:
        raise InvalidInputError(f"{key}={path} has {len(values)} labels but the data have {n} rows; give exactly one "
                                "label per row, in the data's order (missing labels as empty lines).")
    return values


# --------------------------------------------------------------------------------------- folders

def list_files(folder: Path, suffixes) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and suffix(p) in suffixes and not p.name.startswith("."))


def folder_layout(folder: Path, key: str) -> tuple[list[Path], list[str] | None, str]:
    """Files of an ImageFolder-style folder: (files, per-file class or None, "image" | "text").

    One subfolder per class gives labels (the subfolder names); a flat folder has none.
    """
    subdirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    wanted = IMAGE_SUFFIXES + TEXT_SUFFIXES
    top = list_files(folder, wanted)
    if subdirs and not top:
        files, classes = [], []
        for d in subdirs:
            found = list_files(d, wanted)
            files += found
            classes += [d.name] * len(found)
    else:
        files, classes = top, None
    if not files:
        raise InvalidInputError(
            f"{key}={folder} holds no images ({', '.join(IMAGE_SUFFIXES)}) or .txt documents, neither directly nor "
            "in class subfolders. Put the files there (one subfolder per class for labels, or all in the folder).")
    kinds = {"text" if suffix(f) in TEXT_SUFFIXES else "image" for f in files}
    if len(kinds) > 1:
        raise InvalidInputError(f"{key}={folder} mixes images and .txt documents; keep one kind per folder.")
    return files, classes, kinds.pop()


MAX_SIDE = 512  # images larger than this (photos) are scaled down by default: n x 4000 x 3000 x 3 bytes would not fit


def read_images(files: list[Path], key: str, size=None, channels: int | None = None) -> np.ndarray:
    """Decode image files to one uint8 array (n, H, W, C).

    ``size`` (int or (H, W)) resizes every image; with None, images keep their size when all
    agree, else all are resized to the most common size (logged), and a size above
    :data:`MAX_SIDE` is scaled down to it (aspect kept). ``channels`` 1 or 3; None: 1 when every
    image is greyscale, else 3 (RGB). Headers are read first, then each image is decoded and
    resized on its own, so memory holds the result only.
    """
    from PIL import Image, UnidentifiedImageError

    def bad(f, exc):
        return InvalidInputError(f"{key}: image {f} cannot be decoded ({type(exc).__name__}: {exc}). Replace or "
                                 "remove that file.")

    sizes, modes = [], []
    for f in files:
        try:
            with Image.open(f) as im:
                sizes.append(im.size)
                modes.append(im.mode)
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise bad(f, exc) from None
    if channels is None:
        channels = 1 if all(m in ("1", "L", "LA", "I", "I;16", "F") for m in modes) else 3
    if size is None:
        counts = Counter(sizes)
        target = counts.most_common(1)[0][0]
        if max(target) > MAX_SIDE:
            scale = MAX_SIDE / max(target)
            target = (max(1, round(target[0] * scale)), max(1, round(target[1] * scale)))
            log.info("%s: images scaled down to %dx%d (set dataset.image_size=<side> to choose)", key, *target)
        elif len(counts) > 1:
            log.info("%s: images have %d different sizes; all resized to %dx%d (set dataset.image_size=<side> to "
                     "choose)", key, len(counts), target[0], target[1])
    else:
        target = (int(size), int(size)) if np.isscalar(size) else (int(size[1]), int(size[0]))
    out = np.empty((len(files), target[1], target[0], channels), dtype=np.uint8)
    for i, f in enumerate(files):
        try:
            with Image.open(f) as im:
                im = im.convert("L" if channels == 1 else "RGB")
                if im.size != target:
                    im = im.resize(target, Image.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise bad(f, exc) from None
        out[i] = arr[..., None] if channels == 1 else arr
    return out


def read_documents(files: list[Path], key: str) -> list[str]:
    """One document per ``.txt`` file (UTF-8)."""
    docs = []
    for f in files:
        try:
            docs.append(f.read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{key}: {f} could not be read as UTF-8 text ({exc}).") from None
    return docs


def read_lines(path: Path, key: str) -> list[str]:
    """Documents of a ``.txt`` file, one per line; an empty line in the middle is an error."""
    lines = _text_lines(path, key, "UTF-8 text ({exc}).")
    empty = [i for i, ln in enumerate(lines) if not ln.strip()]
    if empty:
        raise InvalidInputError(f"{key}={path}: line {empty[0] + 1} is empty ({len(empty)} empty line(s)); the file "
                                "holds one document per line, so remove the empty lines (or put the texts in a table "
                                "column with dataset.text_column=<name>).")
    if not lines:
        raise InvalidInputError(f"{key}={path} is empty; it needs one document per line.")
    return lines
