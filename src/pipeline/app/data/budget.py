"""How much of a run's data is held in memory (``dataset.memory_budget``; docs/out-of-core.md).

One rule for every size. Data whose latents fit in the budget are handled whole, exactly as
they always were. Larger latents are **out of core**, automatically: they stay on disk (a
``.npy`` read by row range, the embedding store's shards), the reference clustering is fitted
on a uniform sample (``clustering.sample_rows``) and every row is assigned in one chunked pass,
the trees are fitted on every row's concept coordinates when those fit in the budget, else on a
logged stratified sample (``fit.sample_rows``), and every row is predicted and evaluated.

``dataset.memory_budget``: ``auto`` (the default: 1/32 of this machine's memory, at least 256 MB:
768 MB on a 24 GB machine), a number of bytes, or a string such as ``"2GB"``/``"500MB"``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

AUTO_FRACTION = 32  # of the machine's memory
MIN_AUTO = 256 * 2**20
CLUSTER_SAMPLE = 20_000  # clustering.sample_rows when auto: the rows an out-of-core clustering is fitted on
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def machine_memory() -> int:
    """Physical memory of this machine in bytes (cgroup limit if lower)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return int(total)


def parse_bytes(value, key: str = "dataset.memory_budget") -> int:
    """``2GB``, ``500MB``, ``1.5GiB`` or a number of bytes -> bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise InvalidInputError(f"{key}={value!r}: give a size such as 2GB, 500MB or 1.5GiB, a number of bytes, or "
                                    "auto (1/32 of this machine's memory).")
        out = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if out <= 0:
        raise InvalidInputError(f"{key}={value!r}: the memory budget must be positive.")
    return out


def memory_budget(cfg: dict) -> int:
    """``dataset.memory_budget`` in bytes."""
    value = (cfg.get("dataset") or {}).get("memory_budget", "auto")
    if value in (None, "auto"):
        return max(machine_memory() // AUTO_FRACTION, MIN_AUTO)
    return parse_bytes(value)


def out_of_core(cfg: dict, Z) -> bool:
    """True when the latents ``Z`` (an array or a view) are larger than the memory budget."""
    return int(np.prod(Z.shape, dtype=np.int64)) * np.dtype(Z.dtype).itemsize > memory_budget(cfg)


def likely_out_of_core(cfg: dict) -> bool:
    """A guess before anything is read: the configured ``dataset.path`` (a file, or the ``.npy``
    shards of a folder) is larger than the memory budget."""
    path = (cfg.get("dataset") or {}).get("path")
    if not path:
        return False
    p = Path(str(path)).expanduser()
    try:
        size = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.glob("*.npy"))
    except OSError:
        return False
    return size > memory_budget(cfg)


def chunk_rows(cfg: dict, row_bytes: int) -> int:
    """Rows per chunk: ``dataset.chunk_rows``, else as many as fill 1/32 of the budget (a chunk,
    its float64 copy and what is computed from it stay well inside it, beside the next chunk
    being read meanwhile); with ``compute=dask``, 1/8 (the chunks are read by the workers, one at a
    time each, and this process holds only their results; fewer, larger tasks: a pass over 1M x 512
    in 43 tasks took 2.1 s on two workers, in 171 tasks 2.9 s, against 2.4 s in this process)."""
    check_budget(cfg, row_bytes)
    given = (cfg.get("dataset") or {}).get("chunk_rows")
    if given is not None:
        if int(given) < 1:
            raise InvalidInputError(f"dataset.chunk_rows={given}: give a positive number of rows per chunk.")
        budget = memory_budget(cfg)
        if int(given) * row_bytes > budget:
            raise InvalidInputError(
                f"dataset.chunk_rows={given}: one chunk of {given} rows x {row_bytes} bytes is "
                f"{int(given) * row_bytes / 1e6:.0f} MB, more than dataset.memory_budget ({budget / 1e6:.0f} MB). "
                "Give fewer rows per chunk, or a larger dataset.memory_budget.")
        return int(given)
    share = 8 if ((cfg.get("compute") or {}).get("name") or "local") == "dask" else 32
    return max(memory_budget(cfg) // share // max(int(row_bytes), 1), 1)


def check_budget(cfg: dict, row_bytes: int) -> None:
    """A budget below one row (or one chunk) cannot run: one paragraph, before anything is read."""
    budget = memory_budget(cfg)
    if budget < 8 * row_bytes:
        raise InvalidInputError(
            f"dataset.memory_budget={(cfg.get('dataset') or {}).get('memory_budget')} ({budget} bytes) is below one "
            f"chunk of this data (8 rows of {row_bytes} bytes each); nothing can be processed within it. Give at "
            "least a few MB (e.g. dataset.memory_budget=256MB), or auto.")


def sample_rows(value, n: int, default: int, key: str) -> int | None:
    """A configured sample size (``clustering.sample_rows`` / ``fit.sample_rows``): None = every
    row; checked against the number of rows."""
    if value in (None, "auto"):
        return None if n <= default else default
    value = int(value)
    if value < 1:
        raise InvalidInputError(f"{key}={value}: give a positive number of rows, or null for the default.")
    if value > n:
        raise InvalidInputError(f"{key}={value} is larger than the data ({n} rows): a sample cannot hold more rows "
                                f"than there are. Use {key}=null for the default, or a number up to {n}.")
    return None if value == n else value
