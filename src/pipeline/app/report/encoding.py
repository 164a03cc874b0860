"""Figures encoded as files' bytes (png, svg, pdf), here or in worker processes.

Encoding is most of a report's time (a 10-leaf tree's seven files: about 2.7 s, of which the
PDFs' TrueType font subsetting is a third), and one figure's encoding does not depend on
another's. :class:`Encoder` hands the figures (matplotlib figures pickle: text, geometry and
style, a few tens of kB) to ``workers`` spawned processes, which import matplotlib only, while
the report goes on writing its other files; the bytes are those this process would write (the
same code, the same rc settings). A worker that dies is not fatal: its figures are encoded
here. With ``compute=dask`` the run's Dask workers encode them (they are idle while the report is
written). ``workers <= 1`` encodes each figure here, when its bytes are asked for, and so does a
program started as a script (``python script.py``): a spawned worker would import that script
again, and one without a ``__main__`` guard would redo its work (``python -m pipeline`` and
notebooks start workers).

Spawned, not forked: a fork would copy the page tables of a run holding gigabytes, and the
children's resident sets would count those pages again.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import matplotlib as mpl
from matplotlib.figure import Figure

from pipeline.app.workers import main_is_importable

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

    def __init__(self, fig: Figure, formats: tuple[str, ...], prefix: str, future: Future | None,
                 encoder: "Encoder") -> None:
        self.fig, self.formats, self.prefix, self.future, self.encoder = fig, formats, prefix, future, encoder

    def result(self) -> dict[str, bytes]:
        if self.future is not None:
            try:
                return self.future.result()
            except self.encoder.lost as exc:  # a worker died: this figure and the rest are encoded here
                log.warning("a figure-encoding worker died (%s: %s); encoding its figure in this process",
                            type(exc).__name__, exc)
                self.encoder.here = True
        return encode(self.fig, self.formats, self.prefix)


class Encoder:
    """Encodes figures in up to ``workers`` spawned processes, started at the first
    :meth:`submit`; with ``workers <= 1``, or where no process can be started, here.
    ``client``: a running Dask client (``compute=dask``), whose workers encode them instead."""

    def __init__(self, workers: int = 1, client=None) -> None:
        self.workers = int(workers)
        self.client = client
        self._pool: ProcessPoolExecutor | None = None
        # encode in this process from now on: one worker asked for, none could start, or one died
        # (then the others are stopped at close)
        self.here = self.workers <= 1 and client is None

    @property
    def lost(self) -> type[BaseException]:
        """What a future raises when its worker is gone (Dask: KilledWorker, a closed comm, ...)."""
        return Exception if self.client is not None else BrokenProcessPool

    def submit(self, fig: Figure, formats: tuple[str, ...] = FORMATS, prefix: str = "") -> Encoding:
        send, future = self._sender(), None
        if send is not None:
            try:
                future = send(encode, fig, formats, prefix)
            except Exception as exc:  # noqa: BLE001 - the workers are gone, or a closed Dask cluster
                log.info("figures are encoded in this process: the workers did not take them (%s)", exc)
                self.here = True
        return Encoding(fig, formats, prefix, future, self)

    def _sender(self):
        """The function that hands a task to the workers (starting them), or None: encode here."""
        if self.here:
            return None
        if self.client is not None:
            return lambda *args: self.client.submit(*args, pure=False)
        if self._pool is None:
            if not main_is_importable():
                log.info("figures are encoded in this process: a worker process would run this program's script "
                         "again (%s)", getattr(sys.modules.get("__main__"), "__file__", "?"))
                self.here = True
                return None
            try:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            except (OSError, ValueError) as exc:  # no processes here (a sandbox): encode in this process
                log.info("figures are encoded in this process: no worker process could start (%s)", exc)
                self.here = True
                return None
        return self._pool.submit

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not self.here:
            pool.shutdown(wait=True, cancel_futures=True)
            return
        # after a worker died, a worker started meanwhile can wait forever for work: stop them all
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
            process.join(timeout=10)

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
