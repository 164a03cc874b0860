"""Class-attribute tables from files: a shipped ``type: class_attributes`` concept file
(``concepts=fashion_attributes``) or the official AwA2 files, and the images of the dataset's
other classes that the CAVs are fitted on (:mod:`pipeline.concepts.attributes`).

A ``class_attributes`` file lists the table's classes and, per attribute, a one-line definition
and the classes having it::

    classes: [T-shirt/top, Trouser, ...]
    concepts:
      footwear: {definition: worn on the feet, classes: [Sandal, Sneaker, Ankle boot]}

AwA2 (``Animals_with_Attributes2/``): ``classes.txt`` and ``predicates.txt`` ("<id>\\t<name>" per
line), ``predicate-matrix-binary.txt`` (0/1) and ``predicate-matrix-continuous.txt`` (the
annotators' strengths, 0-100), one row per class.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

MATRICES = {"binary": "predicate-matrix-binary.txt", "continuous": "predicate-matrix-continuous.txt"}


def read_table_file(path: Path) -> list[str]:
    """Names in ``<id>\\t<name>`` lines (AwA2 classes.txt / predicates.txt)."""
    try:
        return [line.split()[-1] for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise InvalidInputError(f"AwA2 file {path} could not be read ({exc}); point concepts.root at the folder "
                                "holding classes.txt, predicates.txt and predicate-matrix-binary.txt.") from None


def read_awa2_table(root: Path, matrix: str = "binary") -> tuple[list[str], list[str], np.ndarray]:
    """(classes, predicates, table (n_classes, n_predicates)) from the official AwA2 files."""
    if matrix not in MATRICES:
        raise InvalidInputError(f"concepts.params.matrix={matrix!r}; choose binary or continuous.")
    classes = read_table_file(root / "classes.txt")
    predicates = read_table_file(root / "predicates.txt")
    path = root / MATRICES[matrix]
    try:
        table = np.loadtxt(path, dtype=float, ndmin=2)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path} could not be read as a number table ({exc}); re-copy the AwA2 files.") from None
    if table.shape != (len(classes), len(predicates)):
        raise InvalidInputError(f"{path.name} has shape {table.shape}, expected ({len(classes)} classes, "
                                f"{len(predicates)} predicates).")
    return classes, predicates, table


def spec_table(spec: dict) -> tuple[list[str], list[str], np.ndarray, dict]:
    """(classes, attributes, 0/1 table, definitions) of a ``type: class_attributes`` spec."""
    classes = [str(c) for c in spec.get("classes") or []]
    concepts = spec.get("concepts") or {}
    if not classes or not concepts:
        raise InvalidInputError(f"concept set {spec.get('name')!r}: a class_attributes file needs 'classes' (the "
                                "table's rows) and 'concepts' (attribute: {definition, classes}).")
    names, cols, definitions = [], [], {}
    for n, d in concepts.items():
        if not isinstance(d, dict) or not isinstance(d.get("classes"), list):
            raise InvalidInputError(f"concept set {spec['name']!r}: attribute {n!r} needs 'classes: [...]' (and a "
                                    "one-line 'definition').")
        unknown = [c for c in d["classes"] if str(c) not in classes]
        if unknown:
            raise InvalidInputError(f"concept set {spec['name']!r}: attribute {n!r} names classes {unknown} that are "
                                    f"not in its 'classes' list {classes}.")
        names.append(str(n))
        cols.append([float(c in map(str, d["classes"])) for c in classes])
        definitions[str(n)] = str(d.get("definition", ""))
    return classes, names, np.asarray(cols, dtype=float).T, definitions


def select_attributes(names, table, subset, subsets: dict | None = None) -> tuple[list[str], np.ndarray]:
    """Keep the attributes named by ``subset`` (a list, or the name of one of ``subsets``)."""
    if subset is None:
        return list(names), table
    if isinstance(subset, str):
        if subset not in (subsets or {}):
            raise InvalidInputError(f"unknown attribute subset {subset!r}; choose one of {sorted(subsets or {})} or "
                                    "give a list of attribute names.")
        subset = subsets[subset]
    subset = [str(s) for s in subset]
    unknown = [s for s in subset if s not in names]
    if unknown:
        raise InvalidInputError(f"attributes {unknown} are not in predicates.txt or the attribute table; valid names: "
                                f"{list(names)}.")
    return subset, table[:, [list(names).index(s) for s in subset]]


def other_class_images(cfg: dict | None, dataset, n_classes: int, per_class: int, seed: int):
    """(images, class names) of up to ``per_class`` images of each of the ``n_classes`` classes
    (numbered as the attribute table's rows) that the run left out (``dataset.classes``), read
    again with the run's dataset config; None when the run covers every class or no config is given."""
    chosen = set((dataset.meta or {}).get("classes") or [])
    other = [c for c in range(int(n_classes)) if c not in chosen]
    if cfg is None or not chosen or not other:
        return None
    from pipeline.app.configuration.instantiate import call, factory

    spec = {**cfg["dataset"], "classes": other, "n_samples": None}  # loaders that read per class read only these
    full = call(factory(spec, "dataset"), "dataset", spec, cfg["paths"], seed)
    if full.y is None or not full.class_names:
        return None
    rng = np.random.RandomState(seed)
    pick = [rng.permutation(np.flatnonzero(full.y == c))[:int(per_class)] for c in other]
    pick = np.sort(np.concatenate(pick)) if pick else np.zeros(0, np.int64)
    log.info("class attributes: CAVs on %d images of the %d classes outside the run (%d per class at most)",
             len(pick), len(other), per_class)
    return np.asarray(full.X)[pick], [full.class_names[c] for c in full.y[pick]]


def attribute_examples(spec: dict, dataset, cfg: dict | None = None, root: Path | None = None):
    """The :class:`ConceptExamples` of a class-attribute set: a ``class_attributes`` spec, or AwA2's
    predicate files under ``root`` (``spec["matrix"]``: binary | continuous)."""
    from pipeline.concepts.attributes import class_attribute_examples

    continuous = False
    if spec["type"] == "awa2_predicates":
        continuous = spec.get("matrix", "binary") == "continuous"
        classes, names, table = read_awa2_table(root, spec.get("matrix", "binary"))
        definitions = {}
    else:
        classes, names, table, definitions = spec_table(spec)
    names, table = select_attributes(names, table, spec.get("subset"), spec.get("subsets"))
    seed = int(cfg["seed"]) if cfg is not None else 0
    per_class = int(spec.get("per_class", 100))
    exclude = spec.get("exclude_run_classes", False)
    if not isinstance(exclude, bool):
        raise InvalidInputError(f"concepts.params.exclude_run_classes must be true or false, got {exclude!r}.")
    if exclude and spec.get("fit_on", "other") != "other":
        raise InvalidInputError(f"concepts.params.exclude_run_classes=true learns every concept outside the run, but "
                                f"concepts.params.fit_on={spec.get('fit_on')!r} fits on the run's own images; use "
                                "fit_on=other (the default) with it.")
    others = other_class_images(cfg, dataset, len(classes), per_class, seed) if spec.get("fit_on", "other") == "other" \
        else None
    examples = class_attribute_examples(spec["name"], names, table, classes, dataset, others=others,
                                        per_class=per_class, random_state=seed, continuous=continuous,
                                        definitions=definitions, strict=spec["type"] == "class_attributes",
                                        exclude_run_classes=exclude)
    # the project's own tables (fashion_attributes): a coincidence is a fact of the run, said as such;
    # a published table's (AwA2) goes to the CAV fitter, which names both attributes
    return without_coinciding(examples) if spec["type"] == "class_attributes" else examples


def coinciding(labels: np.ndarray, names, binary: bool = True) -> dict[str, str]:
    """Attributes whose labels on these examples equal an earlier kept attribute's (the same
    examples, the same 0/1/NaN labels), or are its complement (binary): name -> the kept one."""
    labels = np.asarray(labels, dtype=float)
    known = np.isfinite(labels)
    kept, same = [], {}
    for m, n in enumerate(names):
        for j in kept:
            if np.array_equal(known[:, m], known[:, j]) and (
                    np.array_equal(labels[known[:, m], m], labels[known[:, j], j])
                    or (binary and np.array_equal(labels[known[:, m], m], 1 - labels[known[:, j], j]))):
                same[str(n)] = str(names[j])
                break
        else:
            kept.append(m)
    return same


def without_coinciding(examples):
    """``examples`` without the attributes that coincide with an earlier one on these examples
    (:func:`coinciding`), each listed in ``meta["unavailable"]`` with the reason.

    Attributes distinct in the table can coincide on a run's examples: with Fashion-MNIST's
    Shirt / Sneaker / Ankle boot in the run, the images outside it have ``open_toe``,
    ``heel_or_shaft`` and ``footwear`` on exactly the same class (Sandal). Their CAVs would be
    one direction fitted three times; the first is fitted, the others are left out, and the
    reason is stated as a fact about this run (the table itself holds no duplicates)."""
    same = coinciding(examples.labels, examples.names, binary=not examples.continuous)
    if not same:
        return examples
    prov = examples.meta.get("provenance") or {}
    reasons = {}
    for n, j in same.items():
        m, k = examples.names.index(n), examples.names.index(j)
        how = "the same labels as" if np.array_equal(examples.labels[:, m], examples.labels[:, k], equal_nan=True) \
            else "the complement of the labels of"
        where = (prov.get(j) or {}).get("note", "")
        reasons[n] = (f"on this run's examples it has {how} {j!r}" + (f" ({where})" if where else "")
                      + f", so here the two are one concept and only {j!r} is fitted; other class subsets tell them apart")
    log.info("%s: %s: the same examples and labels as %s in this run, so one CAV is fitted for them",
             examples.set_name, ", ".join(same), ", ".join(sorted(set(same.values()))))
    keep = [m for m, n in enumerate(examples.names) if n not in same]
    meta = {**examples.meta, "unavailable": {**(examples.meta.get("unavailable") or {}), **reasons}}
    return dataclasses.replace(examples, names=[examples.names[m] for m in keep], labels=examples.labels[:, keep],
                               meta=meta)
