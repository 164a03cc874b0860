"""Concept-set files: ``concepts/<name>.yaml`` definitions and the data some sets download.

Reads a concept file, fetches / verifies its data through its manifest
(:mod:`pipeline.app.concept_sets.manifest`), and builds the :class:`ConceptExamples` of every
set type: AwA2 predicate tables and BRODEN (:mod:`pipeline.app.concept_sets.broden`) here,
class-level and text-prompt sets in the library (:func:`pipeline.concepts.sets.build_examples`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from pipeline.app.concept_sets.manifest import resolve_root
from pipeline.concepts.sets import TYPES, ConceptExamples, check_dataset, made_for
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


def build_examples(spec: dict, dataset, cfg: dict | None = None, **options) -> ConceptExamples:
    """Concept examples of ``spec`` for ``dataset`` (a :class:`pipeline.app.data.Dataset`).

    ``options`` override keys of the spec (e.g. ``source="pixels"``, ``subset=[...]``,
    ``root=...`` for a local copy of downloaded concept data, ``download=False``). ``cfg`` (the
    run's config) lets class-attribute sets read images of the dataset's other classes.
    """
    check_dataset(spec, dataset.name, [f"concepts={n}" for n in applicable_concept_sets(dataset.name, dataset.kind)])
    if spec.get("type") not in ("awa2_predicates", "broden", "class_attributes"):
        return build_library_examples(spec, dataset, **options)  # the sets that need no files
    spec = {**spec, **{k: v for k, v in options.items() if v is not None}}
    check_dataset(spec, dataset.name)
    if spec["type"] in ("awa2_predicates", "class_attributes"):
        from pipeline.app.concept_sets.attribute_tables import attribute_examples

        return attribute_examples(spec, dataset, cfg, _awa2_root(spec, dataset) if spec["type"] == "awa2_predicates"
                                  else None)
    from pipeline.app.concept_sets.broden import broden_examples  # heavy optional I/O

    return broden_examples(spec, dataset)


#: concept sets for any dataset of a kind, beside the sets made for a dataset by name
#: (text_prompts embeds its prompts with the encoder's text tower: encoder=clip or sbert)
_FOR_KIND = {"image": ("broden", "text_prompts"), "text": ("email_topics", "text_prompts"), "tabular": ()}
#: measured concept sets (conf/concepts/*_measured.yaml, issue 47): by dataset name, and for texts
_MEASURED = {"digits": "mnist_measured", "mnist": "mnist_measured", "fashion": "fashion_measured"}
#: concepts that apply to any data: the user's own examples and measurements, concepts found in the latents
_FOR_ANY = ("examples", "measured", "discovered")


def applicable_concept_sets(dataset_name: str, kind: str) -> list[str]:
    """The ``concepts=`` options that apply to a dataset: the measured set made for it (``mnist_measured``
    for digits, ``fashion_measured`` for fashion_mnist, ``text_measured`` for texts), the sets made for
    it by name (``mnist_geometric``, ``fashion_attributes``), those for its kind (images: ``broden``,
    ``text_prompts``; texts: ``email_topics``, ``text_prompts``; tables: none), then ``examples``,
    ``measured`` (your own measurements) and ``discovered``."""
    base = str(dataset_name).split("/")[0].split("_")[0]
    own = [_MEASURED[base]] if base in _MEASURED else (["text_measured"] if kind == "text" else [])
    for path in sorted(CONCEPTS_DIR.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text()) or {}
        if "*" not in (spec.get("datasets") or ["*"]) and made_for(spec, dataset_name):
            own.append(path.stem)
    return list(dict.fromkeys([*own, *_FOR_KIND.get(kind, ()), *_FOR_ANY]))


def concept_hint(dataset_name: str, kind: str) -> str:
    """One line for a run without concepts whose trees cut latent dimensions (``z11 <= 1.29``)."""
    notes = {"text_prompts": " (with encoder=clip)" if kind == "image" else " (with encoder=sbert)",
             "examples": " (your own, docs/own-data.md)", "measured": " (your own measurements, docs/concepts.md)"}
    options = ", ".join(f"concepts={n}{notes.get(n, '')}" for n in applicable_concept_sets(dataset_name, kind))
    return (f"hint: these rules cut the representation's own dimensions; for rules on human concepts "
            f"add one of {options}.")


def _awa2_root(spec: dict, dataset) -> Path:
    """The folder with AwA2's predicate files: concepts.root, else the dataset's own copy, else the manifest's."""
    source = (dataset.meta or {}).get("source")
    if not spec.get("root") and source and (Path(source) / "predicates.txt").exists():
        spec = {**spec, "root": source}  # the AwA2 copy the dataset itself was loaded from
    return resolve_root(spec)
