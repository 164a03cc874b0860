"""Concept examples: what a concept set's CAVs are fitted on (library layer, no file I/O).

Reading concept-set files (``concepts/<name>.yaml``, AwA2 predicate tables, BRODEN) is the
application layer's job (:mod:`pipeline.app.concept_sets`); given a parsed spec, the
class-level and text-prompt sets are built here. A concept set turns into :class:`ConceptExamples`: a label matrix
(one column per concept; 1 present, 0 absent, NaN unused; real values for continuous
concepts) over examples that are either the dataset's own samples (``inputs=None``:
class-level concepts, pixel detectors, AwA2 predicates) or separate inputs (BRODEN
images, text prompts). Either way the examples are embedded by the same encoder as the
data before :class:`pipeline.concepts.cav.CAVFitter` sees them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from pipeline.concepts.fitters import LinearRegressionFitter, MeanDifferenceFitter
from pipeline.concepts.detectors import binarize_scores, detect_concepts
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

TYPES = ("class_level", "class_attributes", "awa2_predicates", "broden", "text_prompts")

# Marks on the names of concepts learned from the run being explained (docs/concepts.md, "Provenance"):
# "classes": positives (or negatives) are classes of the run, so a cut on the concept restates them;
# "rows": examples are rows of the explained data (fitted in-sample), labelled by something else.
MARKS = {"classes": "†", "rows": "‡"}
MARK_MEANING = {"classes": "its examples are rows of this run whose concept labels follow their classes: restates "
                           "the class labels",
                "rows": "learned from rows of the explained data (in-sample)"}


def provenance(positives: str, negatives: str, from_run: str | None = None, note: str | None = None,
               run_classes=(), strict_available: bool = False) -> dict:
    """Where one concept's examples came from: ``positives`` / ``negatives`` (short descriptions),
    ``from_run`` (None, ``"classes"`` or ``"rows"``: a key of :data:`MARKS`), the run classes its
    labels restate, a one-line ``note`` for the tables and whether ``exclude_run_classes=true``
    would learn it outside the run instead (``strict_available``: class-attribute sets)."""
    if from_run not in (None, *MARKS):
        raise ValueError(f"from_run must be None or one of {list(MARKS)}, got {from_run!r}")
    return {"positives": positives, "negatives": negatives, "from_run": from_run,
            "run_classes": [str(c) for c in run_classes], "strict_available": bool(strict_available),
            "note": note or f"positives: {positives}; negatives: {negatives}"}


def class_list(names) -> str:
    return ", ".join(str(n) for n in names) or "none"


def row_provenance(labels: np.ndarray, names, y=None, class_names=None, unit: str = "rows") -> dict[str, dict]:
    """Provenance of concepts whose examples are rows of the explained data (``labels``: one
    column per concept over the data rows, 1 / 0 / NaN). With class labels ``y``, a concept whose
    positive rows are exactly the rows of some of the run's classes (and its negatives the rows of
    the others) restates those classes (``from_run="classes"``); any other is in-sample (``"rows"``)."""
    labels = np.asarray(labels, dtype=float)
    y = None if y is None else np.asarray(y)
    out = {}
    for m, n in enumerate(names):
        pos, neg = labels[:, m] == 1, labels[:, m] == 0
        counts = f"{int(pos.sum())} positive and {int(neg.sum())} negative {unit} of the explained data"
        if y is not None and y.dtype.kind in "iu" and pos.any():
            known = (pos | neg) & (y >= 0)
            pos_classes = np.unique(y[pos & known])
            if known.any() and np.array_equal(pos[known], np.isin(y[known], pos_classes)):
                named = [class_names[c] if class_names is not None and 0 <= c < len(class_names) else str(c)
                         for c in pos_classes.tolist()]
                neg_named = [class_names[c] if class_names is not None and 0 <= c < len(class_names) else str(c)
                             for c in np.unique(y[neg & known]).tolist()]
                out[str(n)] = provenance(f"this run's {class_list(named)} {unit}", f"this run's {class_list(neg_named)}"
                                         f" {unit}", "classes",
                                         f"learned from this run's {class_list(named)} {unit}: restates the class",
                                         named)
                continue
        out[str(n)] = provenance(f"{int(pos.sum())} {unit} of the explained data",
                                 f"{int(neg.sum())} {unit} of the explained data", "rows", f"learned from {counts}")
    return out


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
    fitter : Fitter subclass, dotted path or None
        Fitter the concept set recommends (e.g. MeanDifferenceFitter for text prompts).
    meta : dict
    """

    set_name: str
    names: list[str]
    labels: np.ndarray
    inputs: object = None
    input_kind: str = "data"
    continuous: bool = False
    fitter: object = None
    meta: dict = field(default_factory=dict)


def made_for(spec: dict, dataset_name: str) -> bool:
    """Whether the concept set's ``datasets`` (``["*"]``: any) include ``dataset_name`` (or its
    base name: ``fashion`` for ``fashion_mnist``)."""
    allowed = spec.get("datasets") or ["*"]
    base = str(dataset_name).split("/")[0].split("_")[0]
    return "*" in allowed or dataset_name in allowed or base in allowed


def check_dataset(spec: dict, dataset_name: str, alternatives=None) -> None:
    """Raise if the concept set is declared for other datasets; ``alternatives`` (option names
    such as ``concepts=discovered``) are the sets the message suggests instead."""
    if not made_for(spec, dataset_name):
        instead = (f"choose one that applies to {dataset_name}: {' or '.join(alternatives)}" if alternatives
                   else "choose a concept set made for this dataset")
        raise InvalidInputError(
            f"concept set {spec['name']!r} is defined for datasets {spec.get('datasets')}, not {dataset_name!r}; "
            f"{instead}."
        )


def build_examples(spec: dict, dataset, **options) -> ConceptExamples:
    """Concept examples of a parsed concept-set ``spec`` for ``dataset`` (a :class:`pipeline.app.data.Dataset`).

    ``options`` override keys of the spec (e.g. ``source="pixels"``). Handles the sets that need
    no files (``class_level``, ``text_prompts``); :func:`pipeline.app.concept_sets.build_examples`
    handles every type.
    """
    spec = {**spec, **{k: v for k, v in options.items() if v is not None}}
    check_dataset(spec, dataset.name)
    kind = spec["type"]
    if kind == "class_level":
        return _class_level(spec, dataset)
    if kind == "text_prompts":
        return text_prompt_examples(spec, dataset)
    raise InvalidInputError(f"concept sets of type {kind!r} read files; build them with "
                            "pipeline.app.concept_sets.build_examples (the pipeline does).")


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
            return ConceptExamples(spec["name"], names, scores, continuous=True, fitter=LinearRegressionFitter,
                                   meta={"source": "pixels"})
        thresholds = {n: concepts[n].get("threshold") for n in names if concepts[n].get("threshold") is not None}
        labels = binarize_scores(scores, names, thresholds).astype(float)
        return ConceptExamples(spec["name"], names, labels, meta={
            "source": "pixels", "scores": scores,
            "provenance": row_provenance(labels, names, dataset.y, dataset.class_names, _unit(dataset))})
    if source != "classes":
        raise InvalidInputError(f"source must be 'classes' or 'pixels', got {source!r}.")
    if dataset.y is None:
        raise InvalidInputError(f"concept set {spec['name']!r} with source=classes needs class labels; "
                                "this dataset has none — use source=pixels.")
    if spec.get("exclude_run_classes"):
        raise InvalidInputError(
            f"concepts.params.exclude_run_classes=true: concept set {spec['name']!r} (type class_level) labels the "
            "run's own images by their class, so every concept restates the run's classes and none is left under "
            "the strict protocol. Use a class-attribute set (concepts=fashion_attributes, awa2_predicates), whose "
            "concepts can be learned from classes outside the run, or concept examples of your own "
            "(concepts=examples); or drop the option (the concepts are then marked †).")
    y = np.asarray(dataset.y)
    labels = np.column_stack([np.isin(y, concepts[n]["classes"]) for n in names]).astype(float)
    labels[y < 0] = np.nan
    return ConceptExamples(spec["name"], names, labels, meta={
        "source": "classes", "provenance": row_provenance(labels, names, y, dataset.class_names, _unit(dataset))})


def _unit(dataset) -> str:
    """What one row of ``dataset`` is called in provenance notes."""
    return {"image": "images", "text": "texts"}.get(getattr(dataset, "kind", None), "rows")


def text_prompt_examples(spec: dict, dataset=None) -> ConceptExamples:
    """Prompts of every concept (expanded by the templates) plus generic negatives.

    Column m is 1 on concept m's prompts and 0 on every other prompt, so each CAV points
    from the other prompts towards the concept's own. ``negatives``: a list of phrases, or
    ``corpus``: ``n_negatives`` (default 200) random texts of ``dataset`` (a text dataset).
    """
    templates = spec.get("templates") or ["{}"]
    if not spec.get("concepts"):
        raise InvalidInputError(f"concept set {spec.get('name')!r} defines no text concepts; give each concept a few "
                                "example phrases, e.g. 'unsubscribe: [click here to unsubscribe, remove me from this "
                                "list]'.")
    negatives = spec.get("negatives") or []
    from_corpus = negatives == "corpus"
    if negatives == "corpus":
        if dataset is None or dataset.kind != "text":
            raise InvalidInputError("negatives: corpus takes random texts of the data as the concepts' negatives, but "
                                    "the data are not texts; give a list of random phrases instead.")
        rng = np.random.RandomState(int(spec.get("random_state", 0)))
        pick = rng.choice(len(dataset.X), size=min(int(spec.get("n_negatives", 200)), len(dataset.X)), replace=False)
        negatives = [dataset.X[i] for i in np.sort(pick)]
    texts, owner = [], []
    for m, (name, prompts) in enumerate(spec["concepts"].items()):
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
            raise InvalidInputError(f"text concept {name!r} has no prompts or an empty one ({prompts!r}); give it a few "
                                    "non-empty example phrases.")
        for p in prompts:
            for t in templates:
                texts.append(t.format(p))
                owner.append(m)
    for p in negatives:
        texts.append(p)
        owner.append(-1)
    names = list(spec["concepts"])
    owner = np.asarray(owner)
    labels = (owner[:, None] == np.arange(len(names))[None, :]).astype(float)
    n_neg = len(negatives)
    prov = {}
    for m, n in enumerate(names):
        pos = f"its {int((owner == m).sum())} example phrases"
        if from_corpus:
            neg = f"the other concepts' phrases and {n_neg} texts of the explained data"
            prov[n] = provenance(pos, neg, "rows", f"positives: {pos}; negatives: {neg} (in-sample)")
        else:
            prov[n] = provenance(pos, f"the other concepts' phrases and {n_neg} generic phrases")
    return ConceptExamples(spec["name"], names, labels, inputs=texts, input_kind="text",
                           fitter=spec.get("fitter") or MeanDifferenceFitter,
                           meta={"n_prompts": len(texts), "provenance": prov})
