"""Stage ``concepts``: dataset + latents -> concept names and CAVs (C, shape (n_concepts, m)).

A no-op (empty artifact) with ``concepts=none`` (``concepts._target_: null``). Otherwise
``concepts._target_`` names a concept source, any callable returning either

* :class:`~pipeline.concepts.sets.ConceptExamples` (the usual case): the stage embeds the
  examples with the data's encoder (the checkpoint the encode artifact names) and fits CAVs
  with ``cav._target_`` (:func:`pipeline.app.stages.cavs.fit_cavs`); or
* a finished artifact ``{"concept_names": [...], "cavs": ndarray (n_concepts, m), ...}``.

The source gets ``concepts.params`` (minus ``select`` / ``select_tol``, which the project
stage uses) and may name any of the offered ``dataset`` (a :class:`pipeline.app.data.Dataset`),
``name``, ``file``, ``data_dir``, ``Z``, ``encode`` and ``cfg``.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pipeline.app.stores.artifacts import ArtifactFieldError, ConceptsArtifact, EncodeArtifact, LoadArtifact
from pipeline.app.configuration.config import concepts_enabled as enabled
from pipeline.app.configuration.instantiate import accepts, call, factory
from pipeline.app.stages.framework import Stage
from pipeline.app.stages.load import artifact_to_dataset
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

STAGE_ONLY = ("select", "select_tol")  # concepts.params used by the project stage, not by the concept source


def _config(cfg: dict) -> dict:
    if not enabled(cfg):
        return {"concepts": "none"}
    # Concept selection runs in the project stage (pipeline.app.stages.cavs), so it is not part of this key.
    params = {k: v for k, v in (cfg["concepts"].get("params") or {}).items() if k not in STAGE_ONLY}
    # tests: the concept_tests stage's (concepts.units is a report setting: the plan keeps it out of cfg)
    node = {k: v for k, v in cfg["concepts"].items() if k != "tests"}
    return {"concepts": {**node, "params": params}, "cav": cfg["cav"], "seed": cfg["seed"]}


def _labelled_rows(examples, Z):
    """Per-row concept labels over latents on disk: only the rows that carry a label are read
    (a row without any takes part in no CAV, so the fit is the one on every row)."""
    from pipeline.app.data.chunked import only_rows

    if examples.inputs is not None or examples.input_kind == "latents":
        return examples, Z
    labels = np.asarray(examples.labels, dtype=np.float64)
    Zex, rows = only_rows(Z, np.flatnonzero(np.isfinite(labels.reshape(len(labels), -1)).any(axis=1)))
    if rows is None:  # latents in memory: used whole
        return examples, Z
    log.info("concepts %s: the %d of %d rows with a concept label read for the CAVs", examples.set_name, rows.size,
             len(Z))
    return dataclasses.replace(examples, labels=examples.labels[rows],
                               meta={**examples.meta, "rows_of_data": rows}), Zex


def content_provenance(examples, Zex, dataset, Z, strict: bool = False):
    """``examples`` with the marks of their provenance decided by content
    (:func:`pipeline.concepts.circularity.content_marks`: which examples are rows of the run, and
    whether their labels follow its classes) whatever their source; with ``strict``
    (``concepts.params.exclude_run_classes=true``) a concept that restates the run's classes is
    left out (``meta["unavailable"]``)."""
    from pipeline.concepts.circularity import content_marks, match_examples
    from pipeline.concepts.sets import provenance

    labels = np.asarray(examples.labels, dtype=np.float64)
    rows_of_data = examples.meta.get("rows_of_data")
    if examples.inputs is None and examples.input_kind == "data":  # the examples are the run's rows
        matched = (np.asarray(rows_of_data, dtype=np.int64) if rows_of_data is not None
                   else np.arange(labels.shape[0], dtype=np.int64))
        how = "the run's own rows"
    else:
        run_inputs = None
        if examples.input_kind in ("image", "text"):
            run_inputs = (dataset.images if dataset.images is not None else dataset.X) if examples.input_kind == "image" \
                else (dataset.X if dataset.kind == "text" else None)
        from pipeline.app.data.chunked import held

        matched, counts = match_examples(examples.inputs if examples.input_kind != "latents" else None, run_inputs,
                                         Zex, held(Z))  # latents on disk are not searched
        how = (f"{counts['content']} by content, {counts['latent']} by identical latents, {counts['near']} near "
               "duplicates" + ("" if counts["searched_near"] else " (not searched: too many rows)"))
    bounded = set(examples.names) if examples.meta.get("measured") is not None else set()
    marks = content_marks(labels, examples.names, matched, dataset.y, bounded=bounded)
    prov = dict(examples.meta.get("provenance") or {})
    for name, mark in marks.items():
        old = prov.get(name) or provenance("its examples", "its counter-examples")
        prov[name] = {**old, "from_run": mark["from_run"], "leakage": mark["leakage"], "matched": mark["n_matched"],
                      # the source's own note where it says the same (it names the classes), else the content's
                      "note": (old["note"] if not mark["from_run"] or old.get("from_run") == mark["from_run"]
                               else mark["note"]),
                      "content_check": f"{mark['note']} (matched: {how})"}
    meta = {**examples.meta, "provenance": prov}
    if strict:
        gone = [n for n, mk in marks.items() if mk["from_run"] == "classes"]
        if gone:
            unavailable = dict(meta.get("unavailable") or {})
            for n in gone:
                unavailable[n] = f"{marks[n]['note']}; left out by the strict protocol (exclude_run_classes=true)"
            keep = [m for m, n in enumerate(examples.names) if n not in gone]
            if not keep:
                raise InvalidInputError(
                    "concepts.params.exclude_run_classes=true: every concept restates the run's classes by content ("
                    + "; ".join(f"{n}: {marks[n]['note']}" for n in gone) + "). Use concept examples that are not the "
                    "run's own rows labelled by class, or drop the option (the concepts are then marked †).")
            meta["unavailable"] = unavailable
            examples = dataclasses.replace(examples, names=[examples.names[m] for m in keep], labels=labels[:, keep])
    return dataclasses.replace(examples, meta=meta)


def _compute(cfg: dict, load: LoadArtifact, encode: EncodeArtifact, latents=None) -> ConceptsArtifact:
    """``latents(cfg, dataset, encode, examples) -> (examples, their latents)`` (default: the
    examples and :func:`pipeline.app.stages.cavs.example_latents`, reading only the labelled rows
    of latents on disk)."""
    if not enabled(cfg):
        return ConceptsArtifact()
    from pipeline.app.stages.cavs import example_latents, fit_cavs  # concept code only for concept runs
    from pipeline.concepts.sets import ConceptExamples

    ccfg = cfg["concepts"]
    params = {k: v for k, v in (ccfg.get("params") or {}).items() if k not in STAGE_ONLY}
    # the strict protocol applies to every source: a source that has its own (learning class attributes
    # outside the run) gets the option too; for every source, a concept restating the run's classes by
    # content is left out below
    strict = bool(params.pop("exclude_run_classes", False))
    node = {**ccfg, "params": params}
    if strict and accepts(node, "exclude_run_classes", "concepts"):
        node["params"] = {**params, "exclude_run_classes": True}
    dataset = artifact_to_dataset(load)
    offered = {"dataset": dataset, "name": ccfg["name"], "file": ccfg.get("file"),
               "data_dir": cfg["paths"].get("data_dir"), "Z": encode.Z, "encode": encode, "cfg": cfg}
    got = call(factory(node, "concepts"), "concepts", offered=offered)
    if isinstance(got, ConceptExamples):
        got, Zex = (latents(cfg, dataset, encode, got) if latents is not None
                    else _labelled_rows(got, example_latents(cfg, dataset, encode.Z, got, encode)))
        got = content_provenance(got, Zex, dataset, encode.Z, strict)
        out = fit_cavs(cfg, got, Zex, encode.Z, dataset.y)
    elif isinstance(got, dict):
        try:
            out = ConceptsArtifact.from_record(got)
        except ArtifactFieldError as exc:
            raise InvalidInputError(f"concepts._target_={ccfg['_target_']} returned a dict that is not a concepts "
                                    f"artifact: {exc}") from None
    else:
        raise InvalidInputError(f"concepts._target_={ccfg['_target_']} returned {type(got).__name__}; a concept "
                                "source returns ConceptExamples or a dict with 'cavs' and 'concept_names'.")
    cavs = np.asarray(out.cavs, dtype=np.float64)
    names = out.concept_names
    if cavs.ndim != 2 or cavs.shape[1] != encode.Z.shape[1] or names is None or len(names) != len(cavs):
        raise InvalidInputError(
            f"concept source {ccfg['name']!r} gave cavs of shape {cavs.shape} and "
            f"{None if names is None else len(names)} names; expected (n_concepts, {encode.Z.shape[1]}) and one "
            "name per CAV."
        )
    return dataclasses.replace(out, cavs=cavs, concept_names=[str(n) for n in names])


def runs_ahead(plan, done: dict) -> bool:
    """The CAVs are fitted by a worker process while the clustering is fitted where the latents
    exceed the memory budget (``dataset.memory_budget``): there the clustering is fitted on a
    sample, on one thread, for seconds, while the CAV fits (hundreds of small fits bound by
    Python's GIL) take another core, and the stage's inputs are views of files that pickle in a
    few bytes. Smaller runs fit them here, as they always did (a worker costs ~2 s to start).
    Before any stage ran (no ``encode`` in ``done``): a guess from the configured file's size, to
    start the worker early (:class:`pipeline.app.stages.framework.RunAhead`)."""
    from pipeline.app.execution.workers import main_is_importable

    if not (plan.concepts and main_is_importable()):
        return False
    return plan.rows.over_budget(done["encode"].artifact.Z if "encode" in done else None,
                                 path=(plan.cfg.get("dataset") or {}).get("path"))


#: what the worker computing the concepts ahead imports while it waits
AHEAD_IMPORTS = ("pipeline.app.stages.cavs", "pipeline.concepts.cav", "sklearn.linear_model")

# version 9 (issue 34): provenance, marks and example-based duplicates (prov34: 4, 5), held-out Platt
# calibration and cav standardize "auto" as the fitters' default (units34); version 10 (issue 47): measured
# concepts (measurements, measures, fit_rows); a merge takes one above both
CONCEPTS = Stage("concepts", ("load", "encode"), _config, _compute, version=11, artifact=ConceptsArtifact)  # 11: measured concepts never †
