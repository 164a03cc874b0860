"""Arrays read in row chunks, never whole (``dataset=files`` with ``dataset.chunk_rows``; docs/out-of-core.md).

:func:`open_chunked` opens

- a ``.npy`` file: its header is parsed and row ranges are read with ``pread`` at their offsets
  (no memory map: the pages read do not stay resident in the process, so its RSS stays at a
  chunk's size however large the file); scattered rows (a sample) are gathered through a
  memory map opened for that gather alone;
- a folder of ``.npy`` or ``.parquet`` shards, read one after another in natural name order
  (``a2`` before ``a10``: numbers in names compare as numbers) or in the order a
  ``manifest.txt`` in the folder lists them (one file name a line; it must name every shard
  once); the order used is logged;
- a zarr array (a ``.zarr`` folder, or a folder holding ``.zarray``/``zarr.json``).

Every reader is a small picklable object (paths and shapes only) so Dask workers open the
file themselves. A 1-D array (labels, ids) is read the same way. Failures are one paragraph
naming the file: a shard of another width or dtype, a file shorter than its header says.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

GATHER_ROWS = 4096  # scattered rows gathered per memory map (at most a few MB of its pages resident)
KINDS = ("a .npy file, a folder of .npy or .parquet shards, or a zarr array (a .zarr folder)")
MANIFEST = "manifest.txt"  # in a shard folder: the shards' order, one file name a line
SHARD_SUFFIXES = (".npy", ".parquet", ".pq")


@dataclass(frozen=True)
class _NpyPart:
    path: str
    offset: int  # byte offset of the first row
    rows: int
    dtype: str
    width: tuple  # shape of one row: () for labels, (d,) for embeddings

    def read(self, start: int, stop: int) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        row_bytes = dtype.itemsize * int(np.prod(self.width, dtype=np.int64))
        out = np.empty((stop - start, *self.width), dtype=dtype)
        buf = memoryview(out.reshape(-1).view(np.uint8))
        fd = os.open(self.path, os.O_RDONLY)
        try:
            pos, done = self.offset + start * row_bytes, 0
            while done < len(buf):
                got = os.preadv(fd, [buf[done:]], pos + done)
                if got == 0:
                    raise InvalidInputError(f"{self.path} ended after {(pos + done - self.offset) // row_bytes} "
                                            f"rows although its header announces {self.rows}: the file is "
                                            "truncated (an interrupted copy?). Copy or write it again.")
                done += got
        finally:
            os.close(fd)
        return out

    def read_each(self, rows: np.ndarray) -> np.ndarray:
        """The rows at (sorted, part-local) indices ``rows``, gathered by numpy from read-only
        memory maps advised for random access (each row costs one small read, not a 128 KB
        read-ahead), :data:`GATHER_ROWS` rows per map, each unmapped before the next (the pages
        read never stay resident). One numpy call per map releases the GIL: a loop of one
        ``pread`` per row (0.8 s for 20,000 rows of a cold 20 GB file) waited for the GIL after
        every read while another thread computed, 105 s with one busy thread beside it."""
        import mmap

        dtype = np.dtype(self.dtype)
        per_row = int(np.prod(self.width, dtype=np.int64))
        row_bytes = dtype.itemsize * per_row
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, *self.width), dtype=dtype)
        if rows.size == 0 or row_bytes == 0:
            return out
        with open(self.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < self.offset + self.rows * row_bytes:  # a map read past the end would kill the process (SIGBUS)
                raise InvalidInputError(f"{self.path} holds {max(size - self.offset, 0) // row_bytes} rows although "
                                        f"its header announces {self.rows}: the file is truncated (an interrupted "
                                        "copy?). Copy or write it again.")
            for i in range(0, rows.size, GATHER_ROWS):
                block = rows[i:i + GATHER_ROWS]
                lo, hi = int(block.min()), int(block.max()) + 1
                first = self.offset + lo * row_bytes
                start = first // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
                m = mmap.mmap(fh.fileno(), self.offset + hi * row_bytes - start, access=mmap.ACCESS_READ, offset=start)
                try:
                    if hasattr(m, "madvise") and hasattr(mmap, "MADV_RANDOM"):
                        m.madvise(mmap.MADV_RANDOM)
                    view = np.frombuffer(m, dtype=dtype, count=(hi - lo) * per_row, offset=first - start)
                    out[i:i + block.size] = view.reshape(hi - lo, *self.width)[block - lo]
                    del view  # the map closes only once no array refers to it
                finally:
                    m.close()
        return out


@dataclass(frozen=True)
class _ParquetPart:
    path: str
    rows: int
    dtype: str
    width: tuple
    columns: tuple

    def read(self, start: int, stop: int) -> np.ndarray:
        import pyarrow.parquet as pq

        f = pq.ParquetFile(self.path)
        out, first = [], 0
        for g in range(f.num_row_groups):  # only the row groups overlapping [start, stop)
            n = f.metadata.row_group(g).num_rows
            if first + n > start and first < stop:
                table = f.read_row_group(g, columns=list(self.columns))
                block = np.column_stack([table.column(c).to_numpy() for c in self.columns])
                out.append(block[max(start - first, 0):stop - first])
            first += n
        block = np.concatenate(out) if out else np.empty((0, len(self.columns)))
        block = block.astype(self.dtype, copy=False)
        return block[:, 0] if self.width == () else block


@dataclass(frozen=True)
class _ZarrPart:
    path: str
    rows: int
    dtype: str
    width: tuple

    def read(self, start: int, stop: int) -> np.ndarray:
        import zarr

        return np.asarray(zarr.open_array(self.path, mode="r")[start:stop])


@dataclass(frozen=True)
class ChunkedArray:
    """An array of ``shape = (n_rows, *width)`` stored in one or more parts, read by row range.

    Attributes
    ----------
    source : str
        The path the user gave (named in errors).
    parts : tuple
        The files (shards) in order; each reads its own rows.
    """

    source: str
    parts: tuple
    cast: str | None = None  # rows are converted to this dtype when read (the identity encoder's float32)

    @property
    def n_rows(self) -> int:
        return int(sum(p.rows for p in self.parts))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.cast or self.parts[0].dtype)

    def as_dtype(self, dtype) -> "ChunkedArray":
        """The same rows, converted to ``dtype`` as they are read."""
        dtype = np.dtype(dtype)
        return self if dtype == self.dtype else ChunkedArray(self.source, self.parts,
                                                             None if dtype == np.dtype(self.parts[0].dtype) else dtype.str)

    @property
    def shape(self) -> tuple:
        return (self.n_rows, *self.parts[0].width)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as an in-memory array."""
        stop = min(stop, self.n_rows)
        blocks, first = [], 0
        for part in self.parts:
            if first + part.rows > start and first < stop:
                blocks.append(part.read(max(start - first, 0), min(stop, first + part.rows) - first))
            first += part.rows
        if len(blocks) == 1:
            out = blocks[0]
        else:
            out = np.concatenate(blocks) if blocks else np.empty((0, *self.parts[0].width), self.parts[0].dtype)
        return out if self.cast is None else out.astype(self.cast)

    def chunks(self, chunk_rows: int):
        """Iterate over the rows in chunks of ``chunk_rows`` (the last may be shorter)."""
        for start, stop in row_ranges(self, chunk_rows):
            if stop > start:
                yield self.read(start, stop)

    def take(self, indices, chunk_rows: int = 65536) -> np.ndarray:
        """The rows at sorted ``indices``, read chunk by chunk (one pass); a chunk from which few
        rows are wanted is read row by row (a sample of 20,000 of 10M rows reads 20,000 rows,
        not the file)."""
        indices = np.asarray(indices, dtype=np.int64)
        out = np.empty((indices.size, *self.shape[1:]), self.dtype)
        for start, stop in row_ranges(self, chunk_rows):
            lo, hi = np.searchsorted(indices, [start, stop])
            if hi - lo > (stop - start) // 16:
                out[lo:hi] = self.read(start, stop)[indices[lo:hi] - start]
            elif hi > lo:
                out[lo:hi] = self._read_each(indices[lo:hi])
        return out

    def _read_each(self, indices: np.ndarray) -> np.ndarray:
        """The rows at sorted ``indices``, one by one: a ``.npy`` shard through one open file
        (:meth:`_NpyPart.read_each`), any other part a row range of one row each."""
        blocks, first = [], 0
        for part in self.parts:
            lo, hi = np.searchsorted(indices, [first, first + part.rows])
            local = indices[lo:hi] - first
            if local.size:
                blocks.append(part.read_each(local) if isinstance(part, _NpyPart)
                              else np.concatenate([part.read(r, r + 1) for r in local.tolist()]))
            first += part.rows
        out = np.concatenate(blocks)
        return out if self.cast is None else out.astype(self.cast)

    # -- numpy-like reading, so code written for arrays reads a view (rows on demand)
    ndim = property(lambda self: len(self.shape))

    def __len__(self) -> int:
        return self.n_rows

    def __getitem__(self, index):
        """``Z[a:b]`` (step 1), ``Z[i]``, ``Z[indices]`` or ``Z[mask]``: those rows, read now."""
        if isinstance(index, slice):
            start, stop, step = index.indices(self.n_rows)
            if step != 1:
                return self.read(start, stop)[::step]
            return self.read(start, stop)
        if isinstance(index, (int, np.integer)):
            i = int(index) + (self.n_rows if index < 0 else 0)
            return self.read(i, i + 1)[0]
        idx = np.asarray(index)
        if idx.dtype == bool:
            if idx.shape != (self.n_rows,):
                raise IndexError(f"boolean index of shape {idx.shape} for {self.n_rows} rows")
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64)
        order = np.argsort(idx, kind="stable")
        rows = self.take(idx[order])
        out = np.empty_like(rows)
        out[order] = rows
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.read(0, self.n_rows)
        return out if dtype is None else out.astype(dtype, copy=False)


def row_ranges(X, chunk_rows: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the chunks of an array or :class:`ChunkedArray` (one chunk when it is
    held in memory and ``chunk_rows`` covers it)."""
    n = len(X)
    chunk_rows = max(int(chunk_rows), 1)
    return [(s, min(s + chunk_rows, n)) for s in range(0, n, chunk_rows)] or [(0, 0)]


def read_rows(X, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of an array or :class:`ChunkedArray`, in memory."""
    return X.read(start, stop) if isinstance(X, ChunkedArray) else np.asarray(X[start:stop])


def is_view(X) -> bool:
    """True for data read from disk on demand (a :class:`ChunkedArray`), False for an array in memory.
    The stages do not ask: they use the helpers below, which treat an array in memory as one chunk."""
    return isinstance(X, ChunkedArray)


def as_array(X, dtype=None):
    """``X`` as rows the stages can pass on: a view stays a view (read by row range when used),
    anything else is ``np.asarray(X, dtype)``."""
    return X if is_view(X) else np.asarray(X, dtype=dtype)


def held(X):
    """``X`` when it is held in memory, else None (a view: whatever would search or copy every row
    of it is skipped)."""
    return None if is_view(X) else X


def viewed_as(X, dtype):
    """A view read as ``dtype`` (nothing read now), or None for an array in memory."""
    return X.as_dtype(dtype) if is_view(X) else None


def chunks_of(X, chunk_rows: int):
    """The rows of ``X`` a chunk at a time: an array in memory (or a list) is one chunk, as it is;
    a view is read ``chunk_rows`` rows at a time."""
    if not is_view(X):
        yield X
        return
    for start, stop in row_ranges(X, chunk_rows):
        yield read_rows(X, start, stop)


def only_rows(X, rows: np.ndarray):
    """The rows ``rows`` of a view (only those are read) and ``rows``; an array in memory is used
    whole: ``(X, None)``."""
    return (X[rows], rows) if is_view(X) else (X, None)


def nbytes(X) -> int:
    return int(X.nbytes) if hasattr(X, "nbytes") else 0


def _npy_part(path: Path, key: str) -> _NpyPart:
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
    except (ValueError, OSError) as exc:
        raise InvalidInputError(f"{key}: {path} is not a readable .npy file ({exc}). Save it with numpy.save.") from None
    if fortran and len(shape) > 1:
        raise InvalidInputError(f"{key}: {path} is stored in Fortran (column) order, which cannot be read by rows; "
                                "save it with numpy.save(path, numpy.ascontiguousarray(X)).")
    if dtype.hasobject or len(shape) not in (1, 2):
        raise InvalidInputError(f"{key}: {path} holds a {len(shape)}-D {dtype} array; chunked reading takes a 2-D "
                                "numeric matrix (rows x features) or a 1-D vector (labels, ids).")
    rows, width = int(shape[0]), tuple(int(s) for s in shape[1:])
    need = offset + rows * dtype.itemsize * int(np.prod(width, dtype=np.int64))
    size = path.stat().st_size
    if size < need:
        row_bytes = dtype.itemsize * int(np.prod(width, dtype=np.int64))
        raise InvalidInputError(
            f"{key}: {path} is truncated: its header announces {rows} rows of shape {width} {dtype} ({need} bytes) "
            f"but the file has {size} bytes (only {(size - offset) // max(row_bytes, 1)} whole rows). An interrupted "
            "copy or write? Copy or write it again.")
    return _NpyPart(str(path), offset, rows, dtype.str, width)


def _parquet_part(path: Path, key: str, vector: bool) -> _ParquetPart:
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for unreadable files
        raise InvalidInputError(f"{key}: {path} is not a readable parquet file ({type(exc).__name__}: {exc}).") from None
    schema = f.schema_arrow
    columns = tuple(n for n in schema.names if n != "__index_level_0__")
    types = {str(schema.field(c).type) for c in columns}
    if len(types) != 1:
        raise InvalidInputError(f"{key}: {path} has columns of several types {sorted(types)}; shards must hold one "
                                "numeric type (all float32, say).")
    dtype = np.dtype(schema.field(columns[0]).type.to_pandas_dtype())
    width = () if vector and len(columns) == 1 else (len(columns),)
    return _ParquetPart(str(path), int(f.metadata.num_rows), dtype.str, width, columns)


def _zarr_part(path: Path, key: str) -> _ZarrPart:
    try:
        import zarr
    except ImportError:
        raise InvalidInputError(f"{key}={path}: reading zarr needs the zarr package; pip install "
                                "'concept-trees-pipeline[dask]'.") from None
    try:
        arr = zarr.open_array(str(path), mode="r")
    except Exception as exc:  # noqa: BLE001 - zarr raises several types for unreadable stores
        raise InvalidInputError(f"{key}: {path} is not a readable zarr array ({type(exc).__name__}: {exc}).") from None
    return _ZarrPart(str(path), int(arr.shape[0]), np.dtype(arr.dtype).str, tuple(int(s) for s in arr.shape[1:]))


def _is_zarr(p: Path) -> bool:
    return p.suffix == ".zarr" or (p / ".zarray").exists() or (p / "zarr.json").exists()


def natural_key(name: str) -> tuple:
    """Sort key of a file name whose numbers compare as numbers: ``a2`` before ``a10``."""
    return tuple((1, int(t), t) if t.isdigit() else (0, 0, t) for t in re.split(r"(\d+)", name) if t)


def shard_order(folder: Path, key: str) -> list[Path]:
    """The shards of ``folder`` in the order they are read (the module docstring), logged."""
    files = [f for f in folder.iterdir() if f.suffix.lower() in SHARD_SUFFIXES and not f.name.startswith(".")]
    if not files:
        raise InvalidInputError(f"{key}={folder}: the folder holds no .npy or .parquet shards; it takes {KINDS}.")
    manifest = folder / MANIFEST
    if manifest.is_file():
        names = [ln.strip() for ln in manifest.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        known = {f.name: f for f in files}
        unknown = [n for n in names if n not in known]
        twice = sorted({n for n in names if names.count(n) > 1})
        left = sorted(set(known) - set(names), key=natural_key)
        if unknown or twice or left:
            raise InvalidInputError(
                f"{key}={folder}: {MANIFEST} must list every shard of the folder once, in the order to read them; "
                + "; ".join(part for part in (f"it names {unknown}, which are not shards here" if unknown else "",
                                              f"it lists {twice} more than once" if twice else "",
                                              f"it leaves out {left}" if left else "") if part)
                + f". Fix {MANIFEST} (one file name a line), or remove it to read the shards in natural name order.")
        files, how = [known[n] for n in names], f"the order {MANIFEST} lists"
    else:
        files = sorted(files, key=lambda f: natural_key(f.name))
        plain = sorted(files, key=lambda f: f.name)
        how = "natural name order" + (" (numbers as numbers: plain name order would differ)" if plain != files else "")
    shown = [f.name for f in files]
    if len(shown) > 8:
        shown = [*shown[:4], f"... {len(shown) - 6} more ...", *shown[-2:]]
    log.info("%s=%s: %d shards read in %s: %s", key, folder, len(files), how, ", ".join(shown))
    return files


def open_chunked(path, key: str = "dataset.path", vector: bool = False) -> ChunkedArray:
    """The array at ``path`` as a :class:`ChunkedArray` (nothing but headers is read).

    Parameters
    ----------
    path : str or Path
        A ``.npy`` file, a folder of ``.npy`` or ``.parquet`` shards, or a zarr array.
    key : str
        The config key named in errors.
    vector : bool
        A 1-D array is expected (labels, ids); a one-column parquet shard is read as a vector.
    """
    from pipeline.app.data.readers import existing_path

    p = existing_path(path, key, KINDS)
    if p.is_dir() and _is_zarr(p):
        parts = (_zarr_part(p, key),)
    elif p.is_dir():
        files = shard_order(p, key)
        kinds = {f.suffix.lower() for f in files} - {".pq"} | ({".parquet"} if any(f.suffix == ".pq" for f in files) else set())
        if len(kinds) > 1:
            raise InvalidInputError(f"{key}={p}: the folder mixes .npy and .parquet shards; keep one kind.")
        parts = tuple(_npy_part(f, key) if f.suffix.lower() == ".npy" else _parquet_part(f, key, vector) for f in files)
    elif p.suffix.lower() == ".npy":
        parts = (_npy_part(p, key),)
    else:
        raise InvalidInputError(f"{key}={p}: chunked reading takes {KINDS}, not a {p.suffix or 'suffix-less'} file "
                                "(other files are read whole without dataset.chunk_rows).")
    first = parts[0]
    for part in parts[1:]:
        if part.width != first.width or part.dtype != first.dtype:
            raise InvalidInputError(
                f"{key}={p}: shard {Path(part.path).name} holds rows of shape {part.width} {np.dtype(part.dtype)} but "
                f"{Path(first.path).name} holds {first.width} {np.dtype(first.dtype)}; every shard must have the same "
                "width and dtype. Rewrite that shard (or move it out of the folder).")
    want = 1 if vector else 2
    if len(first.width) + 1 != want:
        what = "a 1-D vector (one value per row)" if vector else "a 2-D matrix (rows x features)"
        raise InvalidInputError(f"{key}={p} holds arrays of {len(first.width) + 1} dimensions; it must be {what}.")
    if not vector and not np.issubdtype(np.dtype(first.dtype), np.number):
        raise InvalidInputError(f"{key}={p} holds {np.dtype(first.dtype)} values; embeddings must be numeric.")
    if sum(pt.rows for pt in parts) == 0:
        raise InvalidInputError(f"{key}={p} has no rows.")
    return ChunkedArray(str(p), parts)
