"""Concepts that restate the run's classes, found by content (issue 48).

A concept is circular when its examples *are* rows of the data it explains and its labels follow
those rows' classes: a cut on it then restates the class. Whatever the concept's source (a folder
of images, a table, a class-attribute set), this is decided from the examples themselves:

1. :func:`match_examples` finds which examples are rows of the run — the same content (the
   decoded image's pixels, the text with its whitespace normalised, the same latent vector), or
   near duplicates of a row (cosine similarity of their latents of at least :data:`NEAR_COSINE`:
   a re-encoded or resized copy);
2. :func:`class_leakage` scores how far the matched examples' concept labels follow the run's
   classes: the balanced accuracy of predicting the label from the class alone (each class
   predicts its majority label). 1.0: the labels are a function of the class; a few flipped labels
   barely move it (3 of 183: 0.99).

:func:`content_marks` turns both into the marks of :data:`pipeline.concepts.sets.MARKS`: ``†``
(``"classes"``) when at least :data:`MIN_MATCHED` matched examples have a leakage of at least
:data:`LEAKAGE`, ``‡`` (``"rows"``) when any example is a row of the run (the CAV is fitted
in-sample), none otherwise. Pure: arrays in, dicts out.
"""

from __future__ import annotations

import hashlib

import numpy as np

#: a concept whose matched examples' labels follow the run's classes at least this well restates them (†)
LEAKAGE = 0.95
#: ... judged on at least this many matched examples
MIN_MATCHED = 10
#: examples whose latent has at least this cosine similarity with a run row's are copies of it
NEAR_COSINE = 0.999
#: near duplicates are searched among at most this many run rows (content hashes always)
NEAR_ROWS = 200_000


def _digests(items) -> list[bytes]:
    """One digest per item: the bytes of an array row, or a text with its whitespace normalised."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(hashlib.sha256(" ".join(item.split()).encode("utf-8")).digest())
        else:
            a = np.ascontiguousarray(item)
            out.append(hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).digest())
    return out


def match_examples(example_inputs, run_inputs, Zex=None, Z=None) -> tuple[np.ndarray, dict]:
    """For each concept example, the run row it is a copy of (-1: none), and how many matched how.

    Parameters
    ----------
    example_inputs, run_inputs : sequence of arrays or str, or None
        The examples' and the run's raw inputs (images as arrays, texts); compared by content. None:
        no content comparison.
    Zex : ndarray of shape (n_examples, d), optional
    Z : ndarray of shape (n_rows, d), optional
        Latents of the examples and of the run's rows: an example whose latent row equals a run
        row's, or whose cosine similarity with its nearest run row is at least :data:`NEAR_COSINE`,
        matches it (the nearest-row search only with at most :data:`NEAR_ROWS` run rows).
    """
    n = len(example_inputs) if example_inputs is not None else (len(Zex) if Zex is not None else 0)
    matched = np.full(n, -1, dtype=np.int64)
    counts = {"content": 0, "latent": 0, "near": 0, "searched_near": False}
    if example_inputs is not None and run_inputs is not None and len(run_inputs):
        run = {}
        for i, d in enumerate(_digests(run_inputs)):
            run.setdefault(d, i)
        for j, d in enumerate(_digests(example_inputs)):
            matched[j] = run.get(d, -1)
        counts["content"] = int((matched >= 0).sum())
    if Zex is not None and Z is not None and len(Z) and n:
        Zex = np.asarray(Zex, dtype=np.float64)
        left = np.flatnonzero(matched < 0)
        if left.size:
            run = {}
            for i, d in enumerate(_digests(np.asarray(Z, dtype=np.float32))):
                run.setdefault(d, i)
            hits = [run.get(d, -1) for d in _digests(Zex[left].astype(np.float32))]
            matched[left] = hits
            counts["latent"] = int((np.asarray(hits) >= 0).sum())
        left = np.flatnonzero(matched < 0)
        if left.size and len(Z) <= NEAR_ROWS:
            Zr = np.asarray(Z, dtype=np.float64)
            norms = np.linalg.norm(Zr, axis=1)
            norms[norms == 0] = 1.0
            q = Zex[left]
            qn = np.linalg.norm(q, axis=1)
            qn[qn == 0] = 1.0
            best = np.full(left.size, -np.inf)
            where = np.full(left.size, -1, dtype=np.int64)
            for s in range(0, len(Zr), 8192):  # cosine similarities in blocks of run rows
                sim = (q @ Zr[s:s + 8192].T) / (qn[:, None] * norms[None, s:s + 8192])
                arg = sim.argmax(axis=1)
                top = sim[np.arange(left.size), arg]
                better = top > best
                best[better], where[better] = top[better], arg[better] + s
            near = best >= NEAR_COSINE
            matched[left[near]] = where[near]
            counts["near"] = int(near.sum())
            counts["searched_near"] = True
    return matched, counts


def class_leakage(labels, rows: np.ndarray, y) -> tuple[float, int]:
    """(balanced accuracy of predicting the 1/0 ``labels`` of the matched examples from their run
    rows' classes ``y[rows]`` — each class predicts its majority label; the number of matched
    labelled examples). NaN when fewer than two labels or no class is known."""
    labels = np.asarray(labels, dtype=np.float64)
    rows = np.asarray(rows)
    ok = (rows >= 0) & np.isin(labels, (0.0, 1.0))
    if y is None or not ok.any():
        return float("nan"), 0
    y = np.asarray(y)
    lab, cls = labels[ok], y[rows[ok]]
    known = cls >= 0
    lab, cls = lab[known], cls[known]
    if lab.size == 0 or np.unique(lab).size < 2:
        return float("nan"), int(lab.size)
    pred = np.empty_like(lab)
    for c in np.unique(cls):
        sel = cls == c
        pred[sel] = 1.0 if lab[sel].mean() > 0.5 else 0.0
    recall = [float(np.mean(pred[lab == v] == v)) for v in (0.0, 1.0)]
    return float(np.mean(recall)), int(lab.size)


def content_marks(labels, names, matched: np.ndarray, y, bounded=()) -> dict[str, dict]:
    """Per concept: ``from_run`` (``"classes"``, ``"rows"`` or None), ``leakage``, ``n_matched`` and a
    one-line ``note``. ``labels`` (n_examples, M): 1 / 0 / NaN; ``matched``: each example's run row or
    -1 (:func:`match_examples`); ``bounded``: measured concepts, whose labels are computed from
    each row's input (never its class) and whose in-sample fit is bounded by a disjoint split of the
    rows: no ``‡`` for being fitted on rows of the run, and no ``†`` when the property happens to
    separate the run's classes (the note says it does: a fact about the data, not a circular label)."""
    labels = np.asarray(labels, dtype=np.float64)
    out = {}
    for m, name in enumerate(names):
        col = labels[:, m]
        used = np.isin(col, (0.0, 1.0))
        hit = used & (matched >= 0)
        n_hit = int(hit.sum())
        leak, n_lab = class_leakage(col[hit], matched[hit], y)
        follows = n_lab >= MIN_MATCHED and leak == leak and leak >= LEAKAGE
        if follows and name not in bounded:
            kind = "classes"
            note = (f"{n_hit} of its {int(used.sum())} examples are rows of this run, and their labels follow the run's "
                    f"classes (balanced accuracy {leak:.2f} from the class alone, † at {LEAKAGE}): restates the class")
        elif n_hit and name not in bounded:
            kind = "rows"
            note = (f"{n_hit} of its {int(used.sum())} examples are rows of this run (fitted in-sample)"
                    + (f"; their labels follow the run's classes at balanced accuracy {leak:.2f} (below {LEAKAGE})"
                       if leak == leak else ""))
        else:
            kind = None
            note = (f"its examples are not rows of this run" if not n_hit else
                    f"measured on rows of this run, its CAV fitted on other rows than it is checked on"
                    + (f"; the measured property separates the run's classes (balanced accuracy {leak:.2f} from the "
                       "class alone): computed from the input, not a label restating the class" if follows else
                       f"; its labels follow the run's classes at balanced accuracy {leak:.2f} (below {LEAKAGE})"
                       if leak == leak else ""))
        out[str(name)] = {"from_run": kind, "leakage": leak, "n_matched": n_hit, "note": note}
    return out
