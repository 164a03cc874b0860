"""Class-attribute concepts (the AwA2 protocol): a class x attribute table decides every image's
concept labels, and a CAV points from images of classes lacking the attribute to images of
classes having it.

When a run clusters a subset of the classes, concepts fitted on those same images would be the
cluster labels in disguise (an attribute held by exactly one run class separates that class).
So each attribute's CAV is fitted on images of the *other* classes of the dataset when the
attribute varies there (some have it, some lack it), and only otherwise on all classes (the
run's and the others'). :attr:`ConceptExamples.meta` ``["examples_from"]`` says which, per
concept, for the CAV table. Library layer: the images arrive as arrays.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.concepts.fitters import LinearRegressionFitter
from pipeline.concepts.sets import ConceptExamples
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def table_rows(class_names, table_classes, what: str) -> np.ndarray:
    """Row of the attribute table for each class name (matched ignoring case, '+' and '_')."""
    norm = {_norm(c): i for i, c in enumerate(table_classes)}
    rows = [norm.get(_norm(c)) for c in class_names]
    bad = [c for c, r in zip(class_names, rows) if r is None]
    if bad:
        raise InvalidInputError(f"{what}: the dataset's classes {bad} are not in the attribute table, whose classes are "
                                f"{list(table_classes)}; the table must list every class of the dataset (by name). "
                                "Use a table made for this dataset, or fix its class names.")
    return np.asarray(rows, dtype=np.int64)


def _norm(name) -> str:
    return str(name).replace("+", " ").replace("_", " ").strip().lower()


def check_table(names, table, table_classes, what: str, continuous: bool = False, strict: bool = True) -> None:
    """Every binary attribute needs at least one class having it and one lacking it (``strict=False``:
    such attributes are only logged, and the CAV fitter drops them with its reason)."""
    table = np.asarray(table, dtype=float)
    if table.shape != (len(table_classes), len(names)):
        raise InvalidInputError(f"{what}: the attribute table has shape {table.shape}, expected "
                                f"({len(table_classes)} classes, {len(names)} attributes).")
    if continuous:
        return
    for m, n in enumerate(names):
        if not (table[:, m] == 1).any() or not (table[:, m] == 0).any():
            has = "no" if not (table[:, m] == 1).any() else "every"
            if not strict:
                log.warning("%s: attribute %r is held by %s class; it has no CAV", what, n, has)
                continue
            raise InvalidInputError(f"{what}: attribute {n!r} is held by {has} class of the table, so it has no "
                                    f"{'positive' if has == 'no' else 'negative'} examples and no direction; give it "
                                    "at least one class having it and one lacking it, or remove it.")


def class_attribute_examples(set_name: str, names, table, table_classes, dataset, others=None,
                             per_class: int = 100, random_state: int = 0, continuous: bool = False,
                             definitions: dict | None = None, strict: bool = True) -> ConceptExamples:
    """Concept examples of a class-attribute table for ``dataset``.

    Parameters
    ----------
    names : list of str
        Attribute (concept) names, the table's columns.
    table : array of shape (n_table_classes, n_attributes)
        1/0 per class and attribute (real values when ``continuous``).
    table_classes : list of str
        The table's rows (class names).
    dataset : Dataset
        The run's data (``y``, ``class_names``, images ``X``).
    others : (images, class_names) or None
        A sample of images of the dataset's other classes (uint8 (k, H, W, C)) and each image's
        class name. None or empty: the run covers every class, and the CAVs are fitted on the
        run's own images (``inputs=None``).
    per_class : int
        Images per run class re-used for attributes that do not vary among the other classes.
    strict : bool
        An attribute that every class or no class has is an error (True: a table written for the
        project) or left to the CAV fitter to drop (False: a published table such as AwA2's).
    """
    what = f"concept set {set_name!r}"
    table = np.asarray(table, dtype=float)
    check_table(names, table, table_classes, what, continuous, strict)
    if dataset.y is None or not dataset.class_names:
        raise InvalidInputError(f"{what} labels images by their class, but {dataset.name} has no class labels.")
    run_rows = table_rows(dataset.class_names, table_classes, what)
    y = np.asarray(dataset.y)
    meta = {"definitions": dict(definitions or {}), "source": "class attributes"}
    if others is None or len(others[0]) == 0:
        labels = np.full((len(y), len(names)), np.nan)
        labels[y >= 0] = table[run_rows[y[y >= 0]]]
        meta["examples_from"] = {n: "the run's classes" for n in names}
        return ConceptExamples(set_name, list(names), labels, continuous=continuous,
                               fitter=LinearRegressionFitter if continuous else None, meta=meta)
    other_images, other_names = others
    other_rows = table_rows(other_names, table_classes, what)
    rng = np.random.RandomState(random_state)
    run_pick = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:int(per_class)]
                               for c in range(len(dataset.class_names))])
    run_table_rows = run_rows[y[run_pick]]
    labels = np.full((len(other_rows) + len(run_pick), len(names)), np.nan)
    other_classes = sorted(set(other_rows.tolist()))
    examples_from = {}
    for m, n in enumerate(names):
        col = table[other_rows, m]
        if len(np.unique(col)) > 1:  # the attribute varies among the other classes: fit there only
            labels[:len(other_rows), m] = col
            held = [str(table_classes[r]) for r in other_classes if table[r, m] == 1]
            examples_from[n] = f"other classes ({len(other_classes)}; with it: {', '.join(held) or 'none'})"
        else:
            labels[:len(other_rows), m] = col
            labels[len(other_rows):, m] = table[run_table_rows, m]
            examples_from[n] = "all classes (constant among the other classes)"
    meta["examples_from"] = examples_from
    inputs = np.concatenate([np.asarray(other_images), np.asarray(dataset.X)[run_pick]])
    return ConceptExamples(set_name, list(names), labels, inputs=inputs, input_kind="image", continuous=continuous,
                           fitter=LinearRegressionFitter if continuous else None, meta=meta)
