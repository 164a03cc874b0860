"""``concepts=classes``: a user's class-level concept mapping (concept -> classes) in a YAML file.

The simplest file maps each concept to a list of classes::

    striped: [zebra, tiger]          # class names (the dataset's label values) ...
    four_legs: {classes: [0, 1, 3]}  # ... or 0-based class numbers

The full format of the shipped ``concepts/*.yaml`` files (``name``, ``type: class_level``,
``concepts: {c: {classes: [...]}}``) works too. The concept set keeps the file's ``name``
(default: the file's stem). A row's concept label is 1 when its class is listed, else 0.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.concepts.sets import ConceptExamples, build_examples
from pipeline.validation import InvalidInputError


def class_mapping(dataset, path=None, fingerprint=None) -> ConceptExamples:
    """The concept source of ``concepts=classes concepts.path=<mapping.yaml>``."""
    if not path:
        raise InvalidInputError("concepts=classes needs concepts.path=<mapping.yaml> (concept name -> list of "
                                "classes); see docs/own-data.md.")
    p = Path(str(path)).expanduser()
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        raise InvalidInputError(f"concepts.path={path} is not an existing .yaml file; concepts=classes reads a "
                                "class-level mapping such as 'striped: [zebra, tiger]' (see docs/own-data.md).")
    spec = read_mapping(p)
    spec["concepts"] = {c: {**d, "classes": class_indices(d["classes"], dataset, c, p)}
                        for c, d in spec["concepts"].items()}
    return build_examples(spec, dataset)


def read_mapping(p: Path) -> dict:
    """The mapping as a class-level concept spec (``type`` and ``name`` filled in)."""
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInputError(f"concepts.path={p} could not be read as YAML ({exc}).") from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidInputError(f"concepts.path={p} must map concept names to class lists, e.g. 'loop: [0, 6, 8]'.")
    if "concepts" not in doc:
        doc = {"concepts": doc}
    doc.setdefault("type", "class_level")
    doc.setdefault("name", p.stem)
    if doc["type"] != "class_level":
        raise InvalidInputError(f"{p} is of type {doc['type']!r}; concepts=classes reads class-level mappings.")
    concepts = {}
    for c, d in (doc["concepts"] or {}).items():
        d = {"classes": d} if isinstance(d, list) else d
        if not isinstance(d, dict) or not isinstance(d.get("classes"), list):
            raise InvalidInputError(f"{p}: concept {c!r} needs a list of classes ('{c}: [a, b]' or "
                                    f"'{c}: {{classes: [a, b]}}').")
        concepts[str(c)] = d
    if not concepts:
        raise InvalidInputError(f"{p} defines no concepts.")
    return {**doc, "concepts": concepts, "datasets": ["*"]}


def class_indices(classes, dataset, concept: str, p: Path) -> list[int]:
    """Class names (label values) or 0-based class numbers -> class numbers of ``dataset``."""
    if dataset.y is None:
        raise InvalidInputError(f"concepts=classes ({p}) maps classes to concepts, but {dataset.name} has no labels; "
                                "give dataset.labels=..., or per-row concepts with concepts=examples.")
    names = [str(c) for c in (dataset.class_names or [])]
    n_classes = len(names) or int(dataset.y.max()) + 1
    out = []
    for c in classes:
        if str(c) in names:
            out.append(names.index(str(c)))
        elif isinstance(c, int) and not isinstance(c, bool) and 0 <= c < n_classes:
            out.append(c)
        else:
            raise InvalidInputError(f"{p}: concept {concept!r} lists class {c!r}, which is not a class of "
                                    f"{dataset.name} (its classes: {names or list(range(n_classes))}).")
    return out
