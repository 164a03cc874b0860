"""Figures encoded as files' bytes (png, svg, pdf), here or in worker processes.

Encoding is most of a report's time (a 10-leaf tree's seven files: about 2.7 s, of which the
PDFs' TrueType font subsetting is a third), and one figure's encoding does not depend on
another's. :class:`Encoder` hands the figures (matplotlib figures pickle: text, geometry and
style, a few tens of kB) to ``workers`` spawned processes, which import matplotlib only, while
the report goes on writing its other files; the bytes are those this process would write (the
same code, the same rc settings). A worker that dies is not fatal: its figures are encoded
here. ``workers <= 1`` encodes each figure here, when its bytes are asked for.

Spawned, not forked: a fork would copy the page tables of a run holding gigabytes, and the
children's resident sets would count those pages again.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import matplotlib as mpl
from matplotlib.figure import Figure

log = logging.getLogger(__name__)

FORMATS = ("png", "svg", "pdf")


def figure_bytes(fig: Figure, fmt: str, dpi: int = 200) -> bytes:
    """``fig`` encoded as ``fmt`` (png, svg or pdf): SVG keeps text as text, PDF embeds TrueType fonts."""
    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {FORMATS}, got {fmt!r}.")
    buf = io.BytesIO()
    with mpl.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42, "svg.hashsalt": "pipeline"}):
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", metadata=_metadata(fmt))
    return buf.getvalue()


def _metadata(fmt: str) -> dict | None:
    # No creation dates: the same figure gives the same bytes (reproducible artifacts).
    if fmt == "svg":
        return {"Date": None}
    if fmt == "pdf":
        return {"CreationDate": None}
    if fmt == "png":
        return {"Software": None}
    return None


def encode(fig: Figure, formats: tuple[str, ...], prefix: str = "") -> dict[str, bytes]:
    """``{prefix + fmt: bytes}`` of ``fig`` in each of ``formats``, in that order."""
    return {f"{prefix}{fmt}": figure_bytes(fig, fmt) for fmt in formats}


class Encoding:
    """One figure's files under way; :meth:`result` waits for them (or encodes them here)."""

    def __init__(self, fig: Figure, formats: tuple[str, ...], prefix: str, future: Future | None) -> None:
        self.fig, self.formats, self.prefix, self.future = fig, formats, prefix, future

    def result(self) -> dict[str, bytes]:
        if self.future is not None:
            try:
                return self.future.result()
            except BrokenProcessPool as exc:
                log.warning("a figure-encoding worker process died (%s); encoding its figure in this process", exc)
        return encode(self.fig, self.formats, self.prefix)


class Encoder:
    """Encodes figures in up to ``workers`` spawned processes, started at the first
    :meth:`submit`; with ``workers <= 1``, or where no process can be started, here."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = int(workers)
        self._pool: ProcessPoolExecutor | None = None
        self._failed = self.workers <= 1

    def submit(self, fig: Figure, formats: tuple[str, ...] = FORMATS, prefix: str = "") -> Encoding:
        pool, future = self._start(), None
        if pool is not None:
            try:
                future = pool.submit(encode, fig, formats, prefix)
            except (OSError, RuntimeError) as exc:  # BrokenProcessPool is a RuntimeError
                log.info("figures are encoded in this process: the worker processes are gone (%s)", exc)
                self._failed = True
        return Encoding(fig, formats, prefix, future)

    def _start(self) -> ProcessPoolExecutor | None:
        if self._pool is None and not self._failed:
            try:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            except (OSError, ValueError) as exc:  # no processes here (a sandbox): encode in this process
                log.info("figures are encoded in this process: no worker process could start (%s)", exc)
                self._failed = True
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
