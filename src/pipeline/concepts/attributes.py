"""Class-attribute concepts (the AwA2 protocol): a class x attribute table decides every image's
concept labels, and a CAV points from images of classes lacking the attribute to images of
classes having it.

When a run clusters a subset of the classes, concepts fitted on those same images would be the
cluster labels in disguise (an attribute held by exactly one run class separates that class).
So each attribute's CAV is fitted on images of the *other* classes of the dataset when the
attribute varies there (some have it, some lack it), and only otherwise on all classes (the
run's and the others'): such a concept restates the run's classes and carries the mark ``†``
(:data:`pipeline.concepts.sets.MARKS`). With ``exclude_run_classes=True`` (the strict protocol)
those attributes are left out instead, each with the reason (``meta["unavailable"]``).
:attr:`ConceptExamples.meta` ``["provenance"]`` says, per concept, which classes' images its
positives and negatives are. Library layer: the images arrive as arrays.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.concepts.fitters import LinearRegressionFitter
from pipeline.concepts.sets import ConceptExamples, class_list, provenance
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
                             definitions: dict | None = None, strict: bool = True,
                             exclude_run_classes: bool = False) -> ConceptExamples:
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
    exclude_run_classes : bool
        The strict protocol: learn every attribute only from classes outside the run; attributes
        that do not vary there are left out (``meta["unavailable"]``: name -> why). False: they are
        learned from all classes, the run's included, and marked as restating the run's classes.
    """
    what = f"concept set {set_name!r}"
    table = np.asarray(table, dtype=float)
    check_table(names, table, table_classes, what, continuous, strict)
    if dataset.y is None or not dataset.class_names:
        raise InvalidInputError(f"{what} labels images by their class, but {dataset.name} has no class labels.")
    run_rows = table_rows(dataset.class_names, table_classes, what)
    run_classes = [str(table_classes[r]) for r in sorted(set(run_rows.tolist()))]
    y = np.asarray(dataset.y)
    # per attribute, which of the run's classes (by label) have it: what its transfer is checked on
    meta = {"definitions": dict(definitions or {}), "source": "class attributes",
            "run_attributes": {n: table[run_rows, m].tolist() for m, n in enumerate(names)}}

    def restating(m: int, outside=()) -> dict:
        """Provenance of attribute m learned with the run's images (and ``outside``: table rows)."""
        held = [str(table_classes[r]) for r in sorted(set(run_rows.tolist())) if table[r, m] == 1]
        lacking = [c for c in run_classes if c not in held]
        held_out = [str(table_classes[r]) for r in outside if table[r, m] == 1]
        lacking_out = [str(table_classes[r]) for r in outside if table[r, m] != 1]
        pos = class_list([f"this run's {class_list(held)}"] * bool(held) + held_out)
        neg = class_list([f"this run's {class_list(lacking)}"] * bool(lacking) + lacking_out)
        if held and not held_out:
            note = f"learned from this run's {class_list(held)} images: restates the class"
        else:
            note = (f"its negatives are this run's {class_list(lacking)} images (every class outside the run has "
                    "it): restates the class")
        return provenance(pos + " images", neg + " images", "classes", note, held or lacking,
                          strict_available=bool(outside))

    if others is None or len(others[0]) == 0:
        if exclude_run_classes:
            raise InvalidInputError(
                f"{what} with concepts.params.exclude_run_classes=true: the run covers every class of the table "
                f"({len(run_classes)} classes) or no images of other classes were given, so no concept can be learned "
                "outside the run. Cluster a subset of the classes (dataset.classes=[...]), or drop the option (the "
                "concepts are then learned from the run's own images and marked †).")
        labels = np.full((len(y), len(names)), np.nan)
        labels[y >= 0] = table[run_rows[y[y >= 0]]]
        meta["examples_from"] = {n: "the run's classes" for n in names}
        meta["provenance"] = {n: restating(m) for m, n in enumerate(names)}
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
    examples_from, prov, unavailable = {}, {}, {}
    for m, n in enumerate(names):
        col = table[other_rows, m]
        if len(np.unique(col)) > 1:  # the attribute varies among the other classes: fit there only
            labels[:len(other_rows), m] = col
            held = [str(table_classes[r]) for r in other_classes if table[r, m] == 1]
            lacking = [str(table_classes[r]) for r in other_classes if table[r, m] != 1]
            examples_from[n] = f"other classes ({len(other_classes)}; with it: {', '.join(held) or 'none'})"
            prov[n] = provenance(f"{class_list(held)} images (outside the run)",
                                 f"{class_list(lacking)} images (outside the run)", None,
                                 f"learned from {class_list(held)} vs {class_list(lacking)} images, all outside the run")
        elif exclude_run_classes:
            p = restating(m)
            has = "has" if col[0] == 1 else "lacks"
            unavailable[n] = (f"every class outside the run {has} it, so only this run's own images tell it apart "
                              f"({'positives' if col[0] != 1 else 'negatives'}: this run's "
                              f"{class_list(p['run_classes'])}); learned there it would restate the class "
                              f"(exclude_run_classes=true leaves it out)")
        else:
            labels[:len(other_rows), m] = col
            labels[len(other_rows):, m] = table[run_table_rows, m]
            examples_from[n] = "all classes (constant among the other classes)"
            prov[n] = restating(m, other_classes)
    meta["examples_from"] = examples_from
    meta["provenance"] = prov
    inputs = np.concatenate([np.asarray(other_images), np.asarray(dataset.X)[run_pick]])
    if unavailable:
        meta["unavailable"] = unavailable
        keep = [m for m, n in enumerate(names) if n not in unavailable]
        if not keep:
            raise InvalidInputError(
                f"{what} with concepts.params.exclude_run_classes=true: no attribute varies among the classes "
                f"outside the run, so none can be learned without the run's own images: "
                + "; ".join(f"{n}: {r}" for n, r in unavailable.items())
                + ". Drop the option (the concepts are then marked †) or add attributes that classes outside the run "
                "have and lack.")
        names, labels = [names[m] for m in keep], labels[:, keep]
        used = np.isfinite(labels).any(axis=1)  # the run's images are examples of no kept attribute
        labels, inputs = labels[used], inputs[used]
    return ConceptExamples(set_name, list(names), labels, inputs=inputs, input_kind="image", continuous=continuous,
                           fitter=LinearRegressionFitter if continuous else None, meta=meta)
