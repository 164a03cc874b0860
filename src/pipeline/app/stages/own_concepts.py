"""Concept sources a user brings without writing Python.

``concepts=examples concepts.path=<table | folder | .npz>`` (:mod:`pipeline.app.data.concept_examples`)
and ``concepts=classes concepts.path=<mapping.yaml>`` (a class-level mapping under its own
name). Both are builders of the concepts stage: ``fn(cfg, dataset, Z) -> artifact``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.app.data.concept_examples import read_concept_examples
from pipeline.app.stages.cavs import example_latents, fit_cavs
from pipeline.concepts import build_examples
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def _opts(cfg: dict) -> dict:
    ccfg = cfg["concepts"]
    return {**(ccfg.get("params") or {}), **{k: v for k, v in ccfg.items() if k != "params" and v is not None}}


def build_example_cavs(cfg: dict, dataset, Z: np.ndarray) -> dict:
    """``concepts=examples``: CAVs from a concept table, a concept folder or concept embeddings."""
    opts = _opts(cfg)
    examples = read_concept_examples(opts.get("path"), dataset, id_column=opts.get("id_column"),
                                     name=opts.get("set_name"))
    if examples.input_kind == "latents":
        Zex = np.asarray(examples.inputs, dtype=np.float32)
        if Zex.shape[1] != Z.shape[1]:
            raise InvalidInputError(
                f"concepts.path={opts.get('path')} holds {Zex.shape[1]}-dimensional embeddings but the data's latents "
                f"have {Z.shape[1]} dimensions (encoder={cfg['encoder']['name']}); the concept embeddings must come "
                "from the same model and layer as the data.")
    else:
        Zex = example_latents(cfg, dataset, Z, examples)
    return fit_cavs(cfg, examples, Zex)


def build_class_cavs(cfg: dict, dataset, Z: np.ndarray) -> dict:
    """``concepts=classes``: a class-level YAML mapping (concept -> classes) at ``concepts.path``.

    Classes may be given by label value (``[setosa, virginica]``, the dataset's class names) or
    by 0-based class index; the concept set keeps the file's ``name`` (default: its stem).
    """
    opts = _opts(cfg)
    path = opts.get("path") or opts.get("file")
    if not path:
        raise InvalidInputError("concepts=classes needs concepts.path=<mapping.yaml> (concept name -> classes: [...]); "
                                "see docs/own-data.md.")
    p = Path(str(path)).expanduser()
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        raise InvalidInputError(f"concepts.path={path} is not an existing .yaml file; give a class-level mapping "
                                "(see docs/own-data.md).")
    spec = _read_mapping(p)
    spec = {**spec, "concepts": {c: {**d, "classes": _class_indices(d.get("classes") or [], dataset, c, p)}
                                 for c, d in spec["concepts"].items()}}
    params = {k: v for k, v in (cfg["concepts"].get("params") or {}).items() if k not in ("select", "select_tol")}
    examples = build_examples(spec, dataset, **params)
    return fit_cavs(cfg, examples, example_latents(cfg, dataset, Z, examples))


def _read_mapping(p: Path) -> dict:
    """A class-level concept file: the full format of ``concepts/*.yaml`` or just
    ``{concept: [classes]}``; ``type`` defaults to class_level and ``name`` to the file stem."""
    import yaml

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
    return {**doc, "concepts": concepts}


def _class_indices(classes, dataset, concept: str, p: Path) -> list[int]:
    names = [str(c) for c in (dataset.class_names or [])]
    out = []
    for c in classes:
        if str(c) in names:
            out.append(names.index(str(c)))
        elif isinstance(c, int) and not names or isinstance(c, int) and 0 <= c < len(names):
            out.append(int(c))
        else:
            raise InvalidInputError(f"{p}: concept {concept!r} lists class {c!r}, which is not a class of "
                                    f"{dataset.name} (its classes: {names or 'none: the data have no labels'}).")
    return out
