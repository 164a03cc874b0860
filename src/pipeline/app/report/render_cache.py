"""Rendered report pieces (tree figures, the HTML page's tree views and scatter) kept between runs.

Drawing the figures is most of a warm run's report stage (and the only reason it imports
matplotlib). A rendering is a pure function of its inputs, so :class:`RenderCache` stores each
one under a hash of those inputs and of the code that draws it (the report and tree modules'
sources and the matplotlib version): a run whose trees and data are unchanged copies the bytes
instead of redrawing them, and the files are identical to freshly drawn ones (issue 17).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pickle
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline.app.stores.writing import atomic_write

log = logging.getLogger(__name__)

_CODE = ("app/report/figures.py", "app/execution/encoding.py", "app/report/html.py", "app/report/run_report.py",
         "app/report/concept_plots.py", "app/report/render_cache.py", "trees/tree.py", "trees/rules.py",
         "trees/display.py", "concepts/units.py")


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the sources that draw the report and of the matplotlib version."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.blake2b(digest_size=16)
    root = Path(__file__).resolve().parents[2]
    for rel in _CODE:
        path = root / rel
        h.update(rel.encode() + (path.read_bytes() if path.exists() else b"-"))
    try:
        h.update(version("matplotlib").encode())
    except PackageNotFoundError:
        pass
    return h.hexdigest()


_DIGESTS: dict = {}  # id -> (weak reference, digest): a report hashes the same large arrays for every figure


def _array_digest(a: np.ndarray) -> bytes:
    """A digest of a large array's bytes, computed once per array object (kept while it lives):
    SHA-256 of the SHA-256 digests of its 64 MB pieces, hashed on two threads (hashlib releases
    the GIL; SHA-256 is the fastest hash here: 0.73 GB/s a thread, blake2b 0.42)."""
    hit = _DIGESTS.get(id(a))
    if hit is not None and hit[0]() is a:
        return hit[1]
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.threads import helper_threads

    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    step = 1 << 26
    with ThreadPoolExecutor(max_workers=helper_threads(None)) as pool:
        pieces = list(pool.map(lambda i: hashlib.sha256(flat[i:i + step]).digest(), range(0, flat.size, step)))
    h = hashlib.sha256(b"pieces:%d;" % step)
    for piece in pieces:
        h.update(piece)
    if len(_DIGESTS) > 32:
        _DIGESTS.clear()
    _DIGESTS[id(a)] = (weakref.ref(a), h.digest())
    return _DIGESTS[id(a)][1]


def _feed(h, value: Any) -> None:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.ndarray) and value.dtype != object:
        h.update(f"nd:{value.dtype.str}:{value.shape};".encode())
        h.update(_array_digest(value) if value.nbytes > 1 << 20 else np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__}:{len(value)}[".encode())
        for v in value:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(value, dict):
        h.update(f"dict:{len(value)}{{".encode())
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, np.generic):
        _feed(h, value.item())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        # field by field (a display map holds a column of every row: pickling it for every figure
        # took 24 s at 10M rows); its arrays through the digest memo
        h.update(f"dc:{type(value).__module__}.{type(value).__qualname__}{{".encode())
        for f in dataclasses.fields(value):
            _feed(h, f.name)
            _feed(h, getattr(value, f.name))
        h.update(b"}")
    else:  # anything else by its pickle (a different pickle only costs a redraw)
        h.update(b"pickle:" + pickle.dumps(value, protocol=4))


def key_of(kind: str, inputs: Any) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{kind};{code_version()};".encode())
    _feed(h, inputs)
    return h.hexdigest()


class RenderCache:
    """``get(kind, inputs, render)``: ``render()`` once per distinct ``inputs``, kept under ``root``.

    ``root=None`` always renders (no files). Values are any picklable object (bytes, str, views).
    """

    def __init__(self, root: str | Path | None) -> None:
        self.root = None if root is None else Path(root)

    def get(self, kind: str, inputs: Any, render: Callable[[], Any]) -> Any:
        hit = self.lookup(kind, inputs)
        if hit is not None:
            return hit
        value = render()
        self.store(kind, inputs, value)
        return value

    def lookup(self, kind: str, inputs: Any) -> Any:
        """The rendering kept for ``inputs``, or None."""
        if self.root is None:
            return None
        path = self._path(kind, inputs)
        try:
            return pickle.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged entry is redrawn and replaced
            log.warning("redrawing %s: cached rendering %s unreadable (%s)", kind, path, exc)
            return None

    def store(self, kind: str, inputs: Any, value: Any) -> None:
        """Keep ``value``, the rendering of ``inputs`` (a read-only cache only costs a redraw later)."""
        if self.root is None:
            return
        path = self._path(kind, inputs)
        try:
            atomic_write(path, pickle.dumps(value, protocol=4))
        except OSError as exc:
            log.warning("could not keep the rendered %s in %s (%s)", kind, path, exc)

    def _path(self, kind: str, inputs: Any) -> Path:
        return self.root / kind / f"{key_of(kind, inputs)}.pkl"
