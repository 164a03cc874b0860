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
from dataclasses import dataclass, field
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


def budget_bytes(value) -> int:
    """A ``dataset.memory_budget`` setting (``auto``, a size, a number of bytes) in bytes."""
    if value in (None, "auto"):
        return max(machine_memory() // AUTO_FRACTION, MIN_AUTO)
    return parse_bytes(value)


#: The rows each purpose reads at most, where it samples (docs/out-of-core.md): the clustering's fit
#: out of core, the trees' fit when every row's coordinates exceed a quarter of the budget, the leaf
#: annotations of coordinates on disk (at most ANNOTATION_BYTES of them as float64, at least 10,000
#: rows), the factorisation of ``concepts=discovered`` on latents on disk, the completeness probes.
SAMPLES = {"clustering": CLUSTER_SAMPLE, "trees": 50_000, "annotation": 100_000, "discovery": 50_000,
           "completeness": 5_000}
ANNOTATION_BYTES = 64 << 20
#: the rows of the saved explainer's percentile table (:mod:`pipeline.app.explainer.explainer_bundle`)
PERCENTILE_ROWS = 100_001


def sorts_every_column(n_rows: int) -> bool:
    """Whether the saved explainer's percentile table is read from every row's sorted coordinates
    (up to about a million rows), rather than from a uniform sample of them."""
    return n_rows <= 10 * PERCENTILE_ROWS


@dataclass(frozen=True)
class RowPlan:
    """How many rows a run holds and reads at a time, decided once from its config (the run plan's
    row plan, :func:`pipeline.app.running.plan.validate`; docs/out-of-core.md).

    Attributes
    ----------
    budget : int
        ``dataset.memory_budget`` in bytes: latents larger than this are out of core.
    setting : object
        The budget as given (``auto``, ``2GB`` ...), for messages.
    chunk_rows : int or None
        ``dataset.chunk_rows`` (None: from the budget).
    chunk_share : int
        The share of the budget one chunk fills (the compute backend's: 1/32 in this process,
        1/8 on Dask workers, which read their chunks themselves).
    samples : dict
        Configured sample sizes by purpose (``clustering.sample_rows``, ``fit.sample_rows``;
        None: the purpose's default of :data:`SAMPLES`).
    """

    budget: int
    setting: object = "auto"
    chunk_rows: int | None = None
    chunk_share: int = 32
    samples: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: dict, chunk_share: int = 32) -> "RowPlan":
        ds = cfg.get("dataset") or {}
        setting = ds.get("memory_budget", "auto")
        return cls(budget=budget_bytes(setting), setting=setting, chunk_rows=ds.get("chunk_rows"),
                   chunk_share=chunk_share,
                   samples={"clustering": (cfg.get("clustering") or {}).get("sample_rows"),
                            "trees": (cfg.get("fit") or {}).get("sample_rows")})

    def over_budget(self, Z=None, path=None) -> bool:
        """True when the latents ``Z`` (an array or a view) are larger than the memory budget (the
        run is *out of core*); before anything is read (``Z`` None), a guess: the file ``path`` (or
        the ``.npy`` shards of a folder) is larger than the budget."""
        if Z is not None:
            return int(np.prod(Z.shape, dtype=np.int64)) * np.dtype(Z.dtype).itemsize > self.budget
        if not path:
            return False
        p = Path(str(path)).expanduser()
        try:
            size = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.glob("*.npy"))
        except OSError:
            return False
        return size > self.budget

    def chunk(self, row_bytes: int) -> int:
        """Rows per chunk of a pass over rows of ``row_bytes`` bytes: ``dataset.chunk_rows``, else as
        many as fill ``1/chunk_share`` of the budget (a chunk, its float64 copy and what is computed
        from it stay well inside it, beside the next chunk being read meanwhile; Dask workers read
        their chunks themselves, so fewer, larger tasks: a pass over 1M x 512 in 43 tasks took 2.1 s
        on two workers, in 171 tasks 2.9 s, against 2.4 s in this process)."""
        if self.budget < 8 * row_bytes:
            raise InvalidInputError(
                f"dataset.memory_budget={self.setting} ({self.budget} bytes) is below one chunk of this data (8 rows "
                f"of {row_bytes} bytes each); nothing can be processed within it. Give at least a few MB (e.g. "
                "dataset.memory_budget=256MB), or auto.")
        if self.chunk_rows is not None:
            if int(self.chunk_rows) * row_bytes > self.budget:
                raise InvalidInputError(
                    f"dataset.chunk_rows={self.chunk_rows}: one chunk of {self.chunk_rows} rows x {row_bytes} bytes "
                    f"is {int(self.chunk_rows) * row_bytes / 1e6:.0f} MB, more than dataset.memory_budget "
                    f"({self.budget / 1e6:.0f} MB). Give fewer rows per chunk, or a larger dataset.memory_budget.")
            return int(self.chunk_rows)
        return max(self.budget // self.chunk_share // max(int(row_bytes), 1), 1)

    def sample_size(self, purpose: str, X, latents=None) -> int | None:
        """Rows ``purpose`` (a key of :data:`SAMPLES`) reads of the rows of ``X`` (an array or a
        view), or None for every row: a configured size (``clustering.sample_rows`` /
        ``fit.sample_rows``; larger than the data is an error), else the purpose's default. The
        clustering and the trees sample only out of core (the latents, ``latents`` or else ``X``,
        larger than the budget); the trees then only when every row's float64 coordinates would
        take more than a quarter of it."""
        n, width = len(X), int(np.prod(X.shape[1:]))
        given = self.samples.get(purpose)
        key = {"clustering": "clustering.sample_rows", "trees": "fit.sample_rows"}.get(purpose, purpose)
        if given is not None:
            if int(given) > n:
                raise InvalidInputError(f"{key}={given} is larger than the data ({n} rows): a sample cannot hold more "
                                        f"rows than there are. Use {key}=null for the default, or a number up to {n}.")
            return None if int(given) == n else int(given)
        if purpose in ("clustering", "trees") and not self.over_budget(latents if latents is not None else X):
            return None
        default = SAMPLES[purpose]
        if purpose == "trees":  # every row while their float64 coordinates fit a quarter of the budget
            fits = max(self.budget // 4 // (8 * max(width, 1)), 1)
            default = n if n <= fits else min(fits, default)
        elif purpose == "annotation":
            default = min(default, max(10_000, ANNOTATION_BYTES // (8 * max(width, 1))))
        return None if n <= default else default


def rows_in_memory(X, plan, why: str, purpose: str | None = None) -> np.ndarray:
    """Every row of ``X`` in memory, read on purpose: an array in memory is returned as it is
    (``np.asarray``: no copy); a
    view (:class:`pipeline.app.data.chunked.ChunkedArray`) is read whole when it fits the memory
    budget, else a clear error names the budget and ``why`` every row was wanted.

    Parameters
    ----------
    X : ndarray or ChunkedArray
        The rows.
    plan : RunPlan or RowPlan or None
        The run's plan (its row plan holds the budget); None outside a run (a stage's compute
        called directly): read as asked.
    why : str
        What needs every row, for the message (e.g. ``"the clustering is fitted on every row"``).
    purpose : str, optional
        A key of :data:`SAMPLES` whose sample size the config set (``clustering.sample_rows``,
        ``fit.sample_rows``) to every row: the user asked for every row, which is then read
        whatever the budget.
    """
    from pipeline.app.data.chunked import is_view

    if not is_view(X):
        return np.asarray(X)
    rows = getattr(plan, "rows", plan)
    asked = purpose is not None and rows is not None and rows.samples.get(purpose) is not None
    if rows is not None and not asked and rows.over_budget(X):
        raise InvalidInputError(
            f"{why}: every one of its {len(X)} rows would be read into memory ({X.nbytes / 1e6:.0f} MB), more "
            f"than dataset.memory_budget={rows.setting} ({rows.budget / 1e6:.0f} MB). Give a larger "
            "dataset.memory_budget, or turn that part off for a run of this size.")
    return np.asarray(X)


def check_sample_setting(value, key: str) -> None:
    """A configured sample size is a positive whole number (or null)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{key}={value!r}: give a positive number of rows, or null for the default.")
