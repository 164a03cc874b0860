"""Concept-set files: ``concepts/<name>.yaml`` definitions and the data some sets download.

Reads a concept file, fetches / verifies its data through its manifest
(:mod:`pipeline.app.concept_sets.manifest`), and builds the :class:`ConceptExamples` of every
set type: AwA2 predicate tables and BRODEN (:mod:`pipeline.app.concept_sets.broden`) here,
class-level and text-prompt sets in the library (:func:`pipeline.concepts.sets.build_examples`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import yaml

from pipeline.app.concept_sets.manifest import resolve_root
from pipeline.concepts.sets import TYPES, ConceptExamples, check_dataset
from pipeline.concepts.sets import build_examples as build_library_examples
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

# `concepts/` at the repository root is a symlink to this package-data folder (shipped in wheels).
CONCEPTS_DIR = Path(__file__).resolve().parents[2] / "concepts_data"


def load_concept_spec(name_or_path, concepts_dir=None) -> dict:
    """Parse ``<concepts_dir>/<name>.yaml`` (or a path to a YAML file) into a dict."""
    p = Path(str(name_or_path))
    if p.suffix not in (".yaml", ".yml"):
        p = Path(concepts_dir or CONCEPTS_DIR) / f"{name_or_path}.yaml"
    if not p.exists():
        avail = sorted(f.stem for f in Path(concepts_dir or CONCEPTS_DIR).glob("*.yaml"))
        raise InvalidInputError(f"concept set file {p} not found; available concept sets: {avail}.")
    spec = yaml.safe_load(p.read_text())
    if not isinstance(spec, dict) or spec.get("type") not in TYPES or not spec.get("concepts", True):
        raise InvalidInputError(f"{p}: a concept file needs 'type' (one of {TYPES}) and 'concepts'.")
    spec.setdefault("name", p.stem)
    return spec


def build_examples(spec: dict, dataset, **options) -> ConceptExamples:
    """Concept examples of ``spec`` for ``dataset`` (a :class:`pipeline.app.data.Dataset`).

    ``options`` override keys of the spec (e.g. ``source="pixels"``, ``subset=[...]``,
    ``root=...`` for a local copy of downloaded concept data, ``download=False``).
    """
    if spec.get("type") not in ("awa2_predicates", "broden"):
        return build_library_examples(spec, dataset, **options)  # the sets that need no files
    spec = {**spec, **{k: v for k, v in options.items() if v is not None}}
    check_dataset(spec, dataset.name)
    if spec["type"] == "awa2_predicates":
        return _awa2(spec, dataset)
    from pipeline.app.concept_sets.broden import broden_examples  # heavy optional I/O

    return broden_examples(spec, dataset)


def _read_table(path: Path) -> list[str]:
    """Second column of ``<id>\\t<name>`` files (AwA2 classes.txt / predicates.txt)."""
    return [line.split()[-1] for line in path.read_text().splitlines() if line.strip()]


def _awa2(spec: dict, dataset) -> ConceptExamples:
    source = (dataset.meta or {}).get("source")
    if not spec.get("root") and source and (Path(source) / "predicates.txt").exists():
        spec = {**spec, "root": source}  # the AwA2 copy the dataset itself was loaded from
    root = resolve_root(spec)
    classes = _read_table(root / "classes.txt")
    predicates = _read_table(root / "predicates.txt")
    matrix = np.loadtxt(root / "predicate-matrix-binary.txt", dtype=float, ndmin=2)
    if matrix.shape != (len(classes), len(predicates)):
        raise InvalidInputError(f"predicate-matrix-binary.txt has shape {matrix.shape}, expected "
                                f"({len(classes)} classes, {len(predicates)} predicates).")
    subset = spec.get("subset")
    if isinstance(subset, str):
        if subset not in (spec.get("subsets") or {}):
            raise InvalidInputError(f"unknown predicate subset {subset!r}; choose one of {sorted(spec.get('subsets') or {})} "
                                    "or give a list of predicate names.")
        subset = spec["subsets"][subset]
    names = list(predicates) if subset is None else [str(s) for s in subset]
    unknown = [n for n in names if n not in predicates]
    if unknown:
        raise InvalidInputError(f"predicates {unknown} are not in predicates.txt; valid names: {predicates}.")
    if dataset.y is None or not dataset.class_names:
        raise InvalidInputError("awa2_predicates needs a dataset with labels and class_names (dataset=awa2).")
    norm = {c.replace("+", " ").lower(): i for i, c in enumerate(classes)}
    rows = [norm.get(str(c).replace("+", " ").replace("_", " ").lower()) for c in dataset.class_names]
    bad = [c for c, r in zip(dataset.class_names, rows) if r is None]
    if bad:
        raise InvalidInputError(f"dataset classes {bad} are not AwA2 classes; awa2_predicates only fits dataset=awa2.")
    y = np.asarray(dataset.y)
    table = matrix[np.array(rows)][:, [predicates.index(n) for n in names]]
    labels = np.full((len(y), len(names)), np.nan)
    labels[y >= 0] = table[y[y >= 0]]
    return ConceptExamples(spec["name"], names, labels, meta={"root": str(root)})
