"""Concept sets: read a ``concepts/<name>.yaml`` file and build the examples its CAVs are fitted on.

This is the one module of ``pipeline.concepts`` (with :mod:`manifest` and :mod:`broden`)
that reads files. A concept set turns into :class:`ConceptExamples`: a label matrix
(one column per concept; 1 present, 0 absent, NaN unused; real values for continuous
concepts) over examples that are either the dataset's own samples (``inputs=None``:
class-level concepts, pixel detectors, AwA2 predicates) or separate inputs (BRODEN
images, text prompts). Either way the examples are embedded by the same encoder as the
data before :class:`pipeline.concepts.cav.CAVFitter` sees them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from pipeline.concepts.detectors import binarize_scores, detect_concepts
from pipeline.concepts.manifest import ensure_files
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

# `concepts/` at the repository root is a symlink to this package-data folder (shipped in wheels).
CONCEPTS_DIR = Path(__file__).resolve().parents[1] / "concepts_data"
TYPES = ("class_level", "awa2_predicates", "broden", "text_prompts")


@dataclass
class ConceptExamples:
    """Examples and labels for fitting one concept set's CAVs.

    Attributes
    ----------
    set_name : str
    names : list of str
        Concept names (label columns).
    labels : ndarray of shape (n_examples, n_concepts), float
        1 = present, 0 = absent, NaN = not an example of this concept; real values
        when ``continuous``.
    inputs : None, ndarray or list of str
        None: the examples are the dataset's samples (row i = data row i). Otherwise
        images (n, h, w, c) uint8 or texts to embed with the data's encoder.
    input_kind : {"data", "image", "text"}
    continuous : bool
    fitter : str or None
        Fitter the concept set recommends (e.g. mean_difference for text prompts).
    meta : dict
    """

    set_name: str
    names: list[str]
    labels: np.ndarray
    inputs: object = None
    input_kind: str = "data"
    continuous: bool = False
    fitter: str | None = None
    meta: dict = field(default_factory=dict)


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


def check_dataset(spec: dict, dataset_name: str) -> None:
    """Raise if the concept set is declared for other datasets."""
    allowed = spec.get("datasets") or ["*"]
    base = str(dataset_name).split("/")[0].split("_")[0]
    if "*" not in allowed and dataset_name not in allowed and base not in allowed:
        raise InvalidInputError(
            f"concept set {spec['name']!r} is defined for datasets {allowed}, not {dataset_name!r}; "
            "choose a concept set made for this dataset (e.g. concepts=text_prompts or concepts=broden)."
        )


def build_examples(spec: dict, dataset, **options) -> ConceptExamples:
    """Concept examples of ``spec`` for ``dataset`` (a :class:`pipeline.app.data.Dataset`).

    ``options`` override keys of the spec (e.g. ``source="pixels"``, ``subset=[...]``,
    ``root=...`` for a local copy of downloaded concept data, ``download=False``).
    """
    spec = {**spec, **{k: v for k, v in options.items() if v is not None}}
    check_dataset(spec, dataset.name)
    kind = spec["type"]
    if kind == "class_level":
        return _class_level(spec, dataset)
    if kind == "awa2_predicates":
        return _awa2(spec, dataset)
    if kind == "text_prompts":
        return text_prompt_examples(spec)
    from pipeline.concepts.broden import broden_examples  # heavy optional I/O

    return broden_examples(spec, dataset)


def resolve_root(spec: dict, data_dir=None) -> Path:
    """Local folder of a downloaded concept dataset: ``root`` option, else the manifest's
    ``default_root`` under ``data_dir``; verified (and fetched if allowed) via the manifest."""
    manifest = spec.get("manifest") or {}
    root = spec.get("root") or manifest.get("default_root")
    if root is None:
        raise InvalidInputError(f"concept set {spec['name']!r} needs concepts.root=/path/to/its/files.")
    root = Path(root)
    if not root.is_absolute():
        root = Path(spec.get("data_dir") or data_dir or ".") / root
    return ensure_files(manifest, root, download=bool(spec.get("download", True)))


def _class_level(spec: dict, dataset) -> ConceptExamples:
    concepts = spec["concepts"]
    names = list(concepts)
    source = spec.get("source", "classes")
    if source == "pixels":
        images = dataset.images if dataset.images is not None else dataset.X
        if dataset.kind == "text":
            raise InvalidInputError("pixel detectors need images; use source=classes for this dataset.")
        scores, det_names = detect_concepts(images)
        cols = [det_names.index(concepts[n].get("detector", n)) for n in names]
        scores = scores[:, cols]
        if spec.get("continuous"):
            return ConceptExamples(spec["name"], names, scores, continuous=True, fitter="linear_regression",
                                   meta={"source": "pixels"})
        thresholds = {n: concepts[n].get("threshold") for n in names if concepts[n].get("threshold") is not None}
        labels = binarize_scores(scores, names, thresholds).astype(float)
        return ConceptExamples(spec["name"], names, labels, meta={"source": "pixels", "scores": scores})
    if source != "classes":
        raise InvalidInputError(f"source must be 'classes' or 'pixels', got {source!r}.")
    if dataset.y is None:
        raise InvalidInputError(f"concept set {spec['name']!r} with source=classes needs class labels; "
                                "this dataset has none — use source=pixels.")
    y = np.asarray(dataset.y)
    labels = np.column_stack([np.isin(y, concepts[n]["classes"]) for n in names]).astype(float)
    labels[y < 0] = np.nan
    return ConceptExamples(spec["name"], names, labels, meta={"source": "classes"})


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


def text_prompt_examples(spec: dict) -> ConceptExamples:
    """Prompts of every concept (expanded by the templates) plus generic negatives.

    Column m is 1 on concept m's prompts and 0 on every other prompt, so each CAV points
    from the other prompts towards the concept's own.
    """
    templates = spec.get("templates") or ["{}"]
    texts, owner = [], []
    for m, (name, prompts) in enumerate(spec["concepts"].items()):
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts:
            raise InvalidInputError(f"text concept {name!r} has no prompts.")
        for p in prompts:
            for t in templates:
                texts.append(t.format(p))
                owner.append(m)
    for p in spec.get("negatives") or []:
        texts.append(p)
        owner.append(-1)
    names = list(spec["concepts"])
    owner = np.asarray(owner)
    labels = (owner[:, None] == np.arange(len(names))[None, :]).astype(float)
    return ConceptExamples(spec["name"], names, labels, inputs=texts, input_kind="text",
                           fitter=spec.get("fitter", "mean_difference"), meta={"n_prompts": len(texts)})
