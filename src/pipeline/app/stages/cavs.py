"""Concept glue: concept examples -> their latents -> fitted CAVs, and concept selection.

Used by the ``concepts`` stage (:mod:`pipeline.app.stages.concepts`), whose cache key is made
of the concept and CAV configs, the seed and the dataset + encoder keys, so CAVs are cached
per encoder, concept set and fitter. Optional concept selection (``concepts.params.select=<max>``)
runs in the ``project`` stage through :func:`select_for_reference`, since it needs the
reference mixture.

Config (``conf/concepts/<name>.yaml``, ``conf/cav/<name>.yaml``)::

    concepts: {_target_: pipeline.app.concept_sets.concept_set, name: mnist_geometric, file: null,
               params: {source: classes, select: null, ...}}
    cav: {_target_: pipeline.concepts.CAVFitter, name: logistic, params: {n_repeats: 5, cv: 3, ...}}

``concepts.params`` keys other than ``select`` / ``select_tol`` go to the concept source.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pipeline.app.artifacts import ClusterArtifact, ConceptsArtifact, EncodeArtifact
from pipeline.app.instantiate import call, factory
from pipeline.concepts.fitters import fitter_label
from pipeline.concepts.sets import MARKS
from pipeline.concepts.projection import concept_mixture, pooled_concept_sigma, project
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

def fitter_name(cfg: dict, suggested) -> object:
    """The fitter offered to ``cav._target_``: with ``cav=linear`` (the default) the concept set's
    suggestion (a fitter class or dotted path), else logistic regression. The other ``cav=``
    files set ``cav.params.fitter`` to a fitter class's dotted path, which wins."""
    from pipeline.concepts.fitters import LogisticFitter

    return suggested or LogisticFitter


def example_latents(cfg: dict, dataset, Z: np.ndarray, examples, encode: EncodeArtifact | None = None) -> np.ndarray:
    """Latents of the concept examples: the data's own latents, the examples' own latents
    (``input_kind="latents"``), or the examples embedded by the data's encoder, the one the
    encode artifact ``encode`` names (text prompts go through its text tower when it has one)."""
    if examples.input_kind == "latents":
        out = np.asarray(examples.inputs, dtype=np.float32)
        if out.ndim != 2 or out.shape[1] != Z.shape[1]:
            raise InvalidInputError(
                f"the concept embeddings of {examples.set_name!r} have shape {out.shape} but the data's latents have "
                f"{Z.shape[1]} dimensions (encoder={cfg['encoder']['name']}); the concept embeddings must come "
                "from the same model and layer as the data.")
        return out
    if examples.inputs is None:
        if examples.labels.shape[0] != Z.shape[0]:
            raise InvalidInputError(f"concept labels cover {examples.labels.shape[0]} examples but the data has "
                                    f"{Z.shape[0]} latents.")
        return Z
    encoder = _data_encoder(cfg, encode)
    if examples.input_kind == "text":
        embed = getattr(encoder, "encode_text", None)
        if embed is None and getattr(encoder, "modality", None) not in ("text", None):
            raise InvalidInputError(f"concepts={examples.set_name} embeds text prompts, but encoder="
                                    f"{cfg['encoder']['name']} has no text tower; use encoder=clip or encoder=sbert.")
        embed = embed or encoder.transform
        try:
            out = np.asarray(embed(list(examples.inputs)), dtype=np.float32)
        except InvalidInputError:
            raise
        except Exception as exc:
            raise InvalidInputError(f"encoder={cfg['encoder']['name']} could not embed the text prompts of "
                                    f"concepts={examples.set_name} ({exc}); use encoder=clip or encoder=sbert.") from None
    else:
        out = np.asarray(encoder.transform(examples.inputs), dtype=np.float32)
    if out.ndim != 2 or out.shape[1] != Z.shape[1]:
        raise InvalidInputError(f"concept examples embed to shape {out.shape}, but the data's latents have "
                                f"{Z.shape[1]} dimensions; concept examples must go through the data's encoder.")
    return out


def _data_encoder(cfg: dict, encode: EncodeArtifact | None):
    """The encoder that made the latents (from the checkpoint the encode artifact names)."""
    from pipeline.app.stages.encode import build, fitted_encoder

    if encode is None:
        encoder = build(cfg)
        if encoder.trainable:
            raise InvalidInputError("concept examples need the trained encoder: pass the encode artifact "
                                    "(example_latents(..., encode=...)).")
        return encoder
    return fitted_encoder(cfg, encode)


def fit_cavs(cfg: dict, examples, Zex: np.ndarray) -> ConceptsArtifact:
    """CAVs of ``examples`` (a :class:`ConceptExamples`) fitted on their latents ``Zex``
    with the ``cav`` config: the concepts-stage artifact."""
    cav_params = dict(cfg["cav"].get("params") or {})
    if "n_prompts" in examples.meta:  # text prompts, a handful per concept: no CV / test, no minimum count
        log.info("text prompts: CAVs without held-out accuracy or significance test (too few examples)")
        cav_params.update(min_positives=1, cv=0)
    fitter = call(factory({**cfg["cav"], "params": cav_params}, "cav"), "cav",
                  offered={"fitter": fitter_name(cfg, examples.fitter), "random_state": cfg["seed"], "progress": True})
    fitter.fit(Zex, examples.labels, examples.names)
    summary = fitter.summary()
    calibration = cav_calibration(fitter, Zex, examples)
    for row, (a, b) in zip(summary, calibration):  # the concept's own decision boundary (raw units)
        row["boundary"] = float(-b / a) if np.isfinite(a) and a != 0 else float("nan")
    prov = examples.meta.get("provenance") or {}
    marked = {n: n + MARKS[prov[n]["from_run"]] for n in fitter.concept_names_ if (prov.get(n) or {}).get("from_run")}
    for row in summary:  # where the examples came from, and the mark the rules carry
        p = prov.get(row["concept"])
        if p is not None:
            row["examples"] = p["note"]
        row["concept"] = marked.get(row["concept"], row["concept"])
    attributes = examples.meta.get("source") == "class attributes"  # examples are classes' images, not files
    dropped = {**(examples.meta.get("unavailable") or {}), **{n: _same_as(why, prov.get(n) if attributes else None)
                                                              for n, why in fitter.dropped_.items()}}
    notes = [f"{marked.get(n, n)}: {why}" for n, why in fitter.similar_.items()]
    log.info("CAVs: %s", ", ".join(f"{r['concept']}={r['score']:.3f}" for r in summary))
    names = [marked.get(n, n) for n in fitter.concept_names_]
    return ConceptsArtifact(
        concept_names=names, cavs=fitter.cavs_, cav_summary=summary,
        cav_dropped=dropped, cav_scores=fitter.scores_, cav_random_scores=fitter.random_scores_,
        concept_set=examples.set_name,
        cav_fitter=fitter_label(fitter.fitter),
        n_concept_examples=int(Zex.shape[0]),
        cav_calibration=calibration.tolist(),
        units="probability" if fitter_label(fitter.fitter) in CALIBRATED else "percentile",
        cav_test=fitter.test_line(),
        provenance=[{"concept": marked.get(n, n), **prov[n]} if n in prov else {"concept": n}
                    for n in fitter.concept_names_],
        concept_notes=notes or None,
    )


def _same_as(why: str, prov: dict | None) -> str:
    """A class attribute's duplicate reason with the classes both concepts were learned from."""
    if prov is None or not why.startswith("has the same examples"):
        return why
    return (why.split(", so it is")[0] + f", so on these examples it is the same concept (both {prov['note']}); "
            "only images of other classes could tell them apart")


CALIBRATED = ("logistic",)  # CAV fitters that are calibrated classifiers: default units = probability


def cav_calibration(fitter, Zex: np.ndarray, examples) -> np.ndarray:
    """(slope, intercept) per kept concept: Platt scaling of its labels on held-out CAV
    coordinates (:meth:`pipeline.concepts.cav.CAVFitter.calibration`); NaN for continuous concepts."""
    if not hasattr(fitter, "calibration"):  # a user's CAV estimator without one: no probabilities
        return np.full((len(fitter.concept_names_), 2), np.nan)
    return np.asarray(fitter.calibration(Zex, examples.labels, examples.names), dtype=np.float64).reshape(-1, 2)


def select_for_reference(cfg: dict, concepts: ConceptsArtifact, cluster: ClusterArtifact,
                         Z: np.ndarray) -> ConceptsArtifact:
    """Keep the concepts chosen by greedy q-maximising selection (``concepts.params.select``).

    Uses the reference mixture when it has one, else the pooled within-cluster spread of
    the concept coordinates ``Z Cᵀ``. Returns ``concepts`` unchanged when selection is off.
    """
    params = cfg["concepts"].get("params") or {}
    if not concepts.enabled or not params.get("select"):
        return concepts
    from pipeline.concepts.selection import select_concepts

    C, names = np.asarray(concepts.cavs), list(concepts.concept_names)
    if cluster.means is not None and cluster.covariances is not None:
        mu, sigma = concept_mixture(C, cluster.means, cluster.covariances, concept_names=names)
    else:
        from pipeline.app.data.chunked import is_view

        if is_view(Z):  # latents on disk: Z Cᵀ chunk by chunk
            from pipeline.app.chunk_map import map_rows

            X = map_rows(lambda rows, start: {"X": project(rows, C)}, Z, 65_536, desc="Z Cᵀ")["X"]
        else:
            X = project(Z, C)  # float32 Z: no float64 copy
        mu, sigma = pooled_concept_sigma(X, cluster.labels)
    res = select_concepts(mu, sigma, int(params["select"]), names=names, tol=float(params.get("select_tol", 0.0)))
    log.info("concept selection: %s (q %.3f of %.3f with all %d concepts)", res.names, res.q_selected, res.q_all,
             len(names))
    selection = {"selected": res.names, "q_path": res.q_path, "q_all": res.q_all, "all_concepts": names}
    calibration = (None if concepts.cav_calibration is None
                   else np.asarray(concepts.cav_calibration).reshape(-1, 2)[res.selected].tolist())
    return dataclasses.replace(concepts, cavs=C[res.selected], concept_names=res.names, selection=selection,
                               cav_calibration=calibration)


def display_units(cfg: dict, concepts: ConceptsArtifact, X: np.ndarray, names) -> tuple[str, list | None]:
    """(units kind, one display map per concept or None) for the concept coordinates ``X``:
    ``concepts.units`` when set (an error if it cannot be honoured), else the concept set's
    default (probability for calibrated CAVs, percentile otherwise; a concept without a usable
    calibration then reads in percentiles, with a log line)."""
    from pipeline.concepts.units import UNITS, column_ranges, concept_units, percentile_units, probability_units

    asked = cfg["concepts"].get("units")
    if asked is not None and asked not in UNITS:
        raise InvalidInputError(f"concepts.units={asked!r} is not a unit; choose one of {list(UNITS)} (or null for "
                                "the default: probability for calibrated CAVs, else percentile).")
    calibration = concepts.cav_calibration
    kind = asked or concepts.units or "percentile"
    if asked is not None or kind != "probability":
        return kind, concept_units(kind, X, names, calibration)
    out = []
    count, lo, hi = column_ranges(X)  # row-wise, once (not a strided scan per concept)
    for m, (a, b) in enumerate(np.asarray(calibration, dtype=float).reshape(-1, 2)):
        try:
            out.append(probability_units(a, b, X[:, m], names[m], (count[m], lo[m], hi[m])))
        except InvalidInputError as exc:
            log.info("concept %r reads in percentiles: %s", names[m], str(exc).split(":")[0])
            out.append(percentile_units(X[:, m], names[m], count[m]))
    return kind, out
