"""Notes on measurements: which items a measure could not be computed on, and why, in one paragraph."""

from __future__ import annotations

import numpy as np


def items_phrase(idx, n: int, noun: str = "image") -> str:
    """``'3 of 1000 images (items 4, 17, 230)'``: the count and the first few indices of ``idx``."""
    idx = [int(i) for i in np.asarray(idx).ravel()]
    shown = ", ".join(map(str, idx[:5])) + (f" and {len(idx) - 5} more" if len(idx) > 5 else "")
    return f"{len(idx)} of {n} {noun}{'s' if n != 1 else ''} (item{'s' if len(idx) > 1 else ''} {shown})"


def add_note(notes: dict, names, reason: str, idx, n: int, noun: str = "image") -> None:
    """Record for each measure in ``names`` that it is NaN on items ``idx`` because of ``reason``."""
    idx = np.flatnonzero(idx) if np.asarray(idx).dtype == bool else np.asarray(idx)
    if len(idx) == 0:
        return
    text = f"undefined (NaN) on {items_phrase(idx, n, noun)}: {reason}"
    for name in names:
        notes[name] = f"{notes[name]} Also {text}" if name in notes else f"{name} is {text}"
