"""Figures encoded as files' bytes (png, svg, pdf), here or in worker processes.

Encoding is most of a report's time (a 10-leaf tree's seven files: about 2.7 s, of which the
PDFs' TrueType font subsetting is a third), and one figure's encoding does not depend on
another's. A tree's three layouts print the same text, so they go to one worker together
(:meth:`Encoder.submit_all`) and their PDFs embed one font subset, made once
(:func:`subset_once`: the same bytes, half the time of a tree's three PDFs). :class:`Encoder`
hands the figures (matplotlib figures pickle: text, geometry and style, a few tens of kB) to
``workers`` spawned processes, which import matplotlib only, while the run goes on with its other
work; the bytes are those this process would write (the same code, the same rc settings). A
worker that dies is not fatal: its figures are encoded here. With ``compute=dask`` the run's
Dask workers encode them (they are idle while the report is written). ``workers <= 1`` encodes
each figure here, when its bytes are asked for, and so does a program started as a script
(``python script.py``): a spawned worker would import that script again, and one without a
``__main__`` guard would redo its work (``python -m pipeline`` and notebooks start workers).

Spawned, not forked: a fork would copy the page tables of a run holding gigabytes, and the
children's resident sets would count those pages again.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

import matplotlib as mpl
from matplotlib.figure import Figure

from pipeline.app.execution.workers import kill_pool, pool_processes, spawn_pool

log = logging.getLogger(__name__)

FORMATS = ("png", "svg", "pdf")


def figure_bytes(fig: Figure, fmt: str, dpi: int = 200) -> bytes:
    """``fig`` encoded as ``fmt`` (png, svg or pdf): SVG keeps text as text, PDF embeds TrueType fonts."""
    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {FORMATS}, got {fmt!r}.")
    if fmt == "pdf":
        subset_once()
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


class _Subset:
    """A font subset's file, as :func:`subset_once` keeps it (what matplotlib's PDF writer reads of
    a subset: its bytes, through ``font_as_file``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


_SUBSETS: "OrderedDict[tuple, tuple[bytes, dict]]" = OrderedDict()
_SUBSETS_KEPT = 64  # a subset is a few tens of kB
_SUBSET_LOCK = threading.Lock()


def subset_once() -> None:
    """Make matplotlib's TrueType subsetting (``pdf.fonttype`` 42: a PDF's fonts, 0.25 s each for
    DejaVu Sans) remember its last subsets in this process, by font file and glyphs: a PDF that
    needs a subset made before embeds those very bytes (tested: the same PDF bytes as without).
    Installed once, for the ``get_glyphs_subset`` / ``font_as_file`` pair of matplotlib 3.x; a
    matplotlib without them is left as it is."""
    try:
        from matplotlib.backends import _backend_pdf_ps as pdfps
    except ImportError:  # pragma: no cover - a matplotlib without the module: no memo
        return
    subset, as_file = getattr(pdfps, "get_glyphs_subset", None), getattr(pdfps, "font_as_file", None)
    if subset is None or as_file is None or getattr(subset, "remembers", False) \
            or not hasattr(pdfps, "SubsetResults"):
        return

    @contextmanager
    def get_glyphs_subset(fontfile, glyphs):
        key = (str(fontfile), getattr(fontfile, "face_index", 0), frozenset(glyphs))
        with _SUBSET_LOCK:
            hit = _SUBSETS.get(key)
            if hit is not None:
                _SUBSETS.move_to_end(key)
        if hit is None:
            with subset(fontfile, glyphs) as made:
                hit = (as_file(made.font).getvalue(), dict(made.glyph_index_map))
            with _SUBSET_LOCK:
                _SUBSETS[key] = hit
                while len(_SUBSETS) > _SUBSETS_KEPT:
                    _SUBSETS.popitem(last=False)
        yield pdfps.SubsetResults(_Subset(hit[0]), dict(hit[1]))

    def font_as_file(font):
        return io.BytesIO(font.data) if isinstance(font, _Subset) else as_file(font)

    get_glyphs_subset.remembers = True
    get_glyphs_subset.original, font_as_file.original = subset, as_file  # matplotlib's own (tests)
    pdfps.get_glyphs_subset, pdfps.font_as_file = get_glyphs_subset, font_as_file


def encode(fig: Figure, formats: tuple[str, ...], prefix: str = "") -> dict[str, bytes]:
    """``{prefix + fmt: bytes}`` of ``fig`` in each of ``formats``, in that order."""
    return {f"{prefix}{fmt}": figure_bytes(fig, fmt) for fmt in formats}


def encode_all(jobs: list) -> dict[str, bytes]:
    """:func:`encode` of every ``(fig, formats, prefix)`` in ``jobs``, in one dict."""
    return {name: blob for job in jobs for name, blob in encode(*job).items()}


def _prepare() -> None:
    """In a worker: what encoding a figure imports, before the first figure arrives."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.backends.backend_pdf  # noqa: F401
    import matplotlib.backends.backend_svg  # noqa: F401

    subset_once()


class Encoding:
    """Figures' files under way; :meth:`result` waits for them (or encodes them here)."""

    def __init__(self, jobs: list, future: Future | None, encoder: "Encoder") -> None:
        self.jobs, self.future, self.encoder = jobs, future, encoder

    def result(self) -> dict[str, bytes]:
        if self.future is not None:
            try:
                return self.future.result()
            except self.encoder.lost as exc:  # a worker died: this figure and the rest are encoded here
                log.warning("a figure-encoding worker died (%s: %s); encoding its figure in this process",
                            type(exc).__name__, exc)
                self.encoder.here = True
        return encode_all(self.jobs)


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
        return self.submit_all([(fig, formats, prefix)])

    def submit_all(self, jobs: list) -> Encoding:
        """One task of several ``(fig, formats, prefix)``: encoded by one worker, in one dict."""
        send, future = self._sender(), None
        if send is not None:
            try:
                future = send(encode_all, list(jobs))
            except Exception as exc:  # noqa: BLE001 - the workers are gone, or a closed Dask cluster
                log.info("figures are encoded in this process: the workers did not take them (%s)", exc)
                self.here = True
        return Encoding(list(jobs), future, self)

    def _sender(self):
        """The function that hands a task to the workers (starting them), or None: encode here."""
        if self.here:
            return None
        if self.client is not None:
            return lambda *args: self.client.submit(*args, pure=False)
        if self._pool is not None and any(p.exitcode is not None for p in pool_processes(self._pool)):
            # a worker died (killed, out of memory): the pool is broken, and a task handed to it now
            # would start a process while the pool's own thread tears the others down
            log.warning("a figure-encoding worker died; the remaining figures are encoded in this process")
            self.here = True
            return None
        if self._pool is None:
            self._pool = spawn_pool(self.workers, "figures are encoded")
            if self._pool is None:  # a script's program, or no processes here (a sandbox): encode here
                self.here = True
                return None
        return self._pool.submit

    def start(self) -> None:
        """Start the worker processes now: they import matplotlib and its backends while this
        process goes on (a worker takes ~1.2 s to be ready), instead of when the first figure is sent."""
        send = self._sender()
        if send is None or self.client is not None:
            return
        for _ in range(self.workers):  # a task each: a pool starts a process per task until all run
            try:
                send(_prepare)
            except Exception:  # noqa: BLE001 - figures sent later find the workers gone and are encoded here
                return

    def close(self, wait: bool = True) -> None:
        """Stop the workers; ``wait=False``: without waiting for their processes to end (once every
        figure was received they only tear down, ~0.4 s, while the run writes its other files;
        the interpreter's exit joins them)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not self.here:
            pool.shutdown(wait=wait, cancel_futures=True)
            return
        kill_pool(pool)  # after a worker died, a worker started meanwhile can wait forever for work

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
