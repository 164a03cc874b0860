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
    return ConceptExamples(spec["name"], names, labels, inputs=texts, input_kind="text",
                           fitter=spec.get("fitter") or MeanDifferenceFitter, meta={"n_prompts": len(texts)})
