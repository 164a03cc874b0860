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

from pipeline.app.stores.artifacts import ClusterArtifact, ConceptsArtifact, EncodeArtifact
from pipeline.app.configuration.instantiate import call, factory
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


def fit_cavs(cfg: dict, examples, Zex: np.ndarray, Z=None, y=None) -> ConceptsArtifact:
    """CAVs of ``examples`` (a :class:`ConceptExamples`) fitted on their latents ``Zex``
    with the ``cav`` config: the concepts-stage artifact. With the run's latents ``Z`` (and class
    labels ``y``) each concept's summary row also says how well it transfers to them
    (:func:`transfer_values`)."""
    cav_params = dict(cfg["cav"].get("params") or {})
    if "n_prompts" in examples.meta:  # text prompts, a handful per concept: no CV / test, no minimum count
        log.info("text prompts: CAVs without held-out accuracy or significance test (too few examples)")
        cav_params.update(min_positives=1, cv=0)
    fitter = call(factory({**cfg["cav"], "params": cav_params}, "cav"), "cav",
                  offered={"fitter": fitter_name(cfg, examples.fitter), "random_state": cfg["seed"], "progress": True})
    fitter.fit(Zex, examples.labels, examples.names)
    summary = fitter.summary()
    measured = examples.meta.get("measured")
    calibration = (measured_calibration(fitter, Zex, examples.names, measured, summary) if measured is not None
                   else cav_calibration(fitter, Zex, examples))
    for row, (a, b) in zip(summary, calibration):  # the concept's own decision boundary (raw units)
        row["boundary"] = float(-b / a) if np.isfinite(a) and a != 0 else float("nan")
        row["calibrated_on"] = ("the data's held-out rows" if measured is not None else "the concept's own examples")
    if Z is not None:
        transfer_values(summary, fitter, examples, calibration, Z, y, cfg["seed"])
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
    notes += list(examples.meta.get("notes") or [])
    positives, counts = test_positives(fitter, Zex, examples, cfg["seed"])
    return ConceptsArtifact(
        test_positives=positives, test_positive_counts=counts,
        concept_names=names, cavs=fitter.cavs_, cav_summary=summary,
        cav_dropped=dropped, cav_scores=fitter.scores_,
        concept_set=examples.set_name,
        cav_fitter=fitter_label(fitter.fitter),
        cav_fitter_path=_fitter_path(fitter.fitter),
        n_concept_examples=int(Zex.shape[0]),
        cav_calibration=calibration.tolist(),
        units="probability" if fitter_label(fitter.fitter) in CALIBRATED else "percentile",
        cav_test=fitter.test_line(),
        provenance=[{"concept": marked.get(n, n), **prov[n]} if n in prov else {"concept": n}
                    for n in fitter.concept_names_],
        concept_notes=notes or None,
        **({} if measured is None else {"measurements": np.asarray(measured["values"], dtype=np.float64),
                                         "measures": measured["measures"],
                                         "fit_rows": np.asarray(measured["fit_rows"], dtype=bool)}),
    )


#: rows of the data a transfer check reads at most (a uniform sample beyond)
TRANSFER_ROWS = 20_000


def transfer_values(summary: list[dict], fitter, examples, calibration, Z, y, seed: int) -> None:
    """How well each concept transfers to the data it explains, into its summary row (``transfer``:
    what was checked, ``transfer_value``; the thresholds are the concept_tests stage's):

    * measured concepts: Spearman ρ of the coordinate with the measurement on the rows the CAV was
      not fitted on (already in ``tracks``);
    * class attributes: ROC AUC of the coordinate between the run's rows whose class has the attribute
      and those whose class lacks it;
    * concepts labelled on rows of the data (a concept table): the expected calibration error of
      ``P(concept)`` on those rows (10 bins; the rows include those the CAV was fitted on);
    * anything else (text prompts, example folders): not checked (no rows of the data are labelled).
    """
    from sklearn.metrics import roc_auc_score

    from pipeline.concepts.units import expected_calibration_error

    n = len(Z)
    rows = np.arange(n) if n <= TRANSFER_ROWS else np.sort(np.random.default_rng(seed).choice(n, TRANSFER_ROWS,
                                                                                             replace=False))
    S = project(Z[rows], fitter.cavs_)
    attributes = examples.meta.get("run_attributes") or {}
    labels = np.asarray(examples.labels, dtype=np.float64)
    for m, (row, name) in enumerate(zip(summary, fitter.concept_names_)):
        if "tracks" in row:
            row["transfer"], row["transfer_value"] = "tracking", row["tracks"]
        elif name in attributes and y is not None:
            has = np.asarray(attributes[name], dtype=float)
            yr = np.asarray(y)[rows]
            ok = yr >= 0
            truth = has[yr[ok]] == 1
            if truth.all() or not truth.any():
                row["transfer"], row["transfer_value"] = "auc", float("nan")
                row["transfer_note"] = f"every class of the run {'has' if truth.all() else 'lacks'} it"
            else:
                row["transfer"], row["transfer_value"] = "auc", float(roc_auc_score(truth, S[ok, m]))
        elif examples.inputs is None and examples.input_kind == "data" and labels.shape[0] == n:
            a, b = calibration[m]
            col = labels[:, examples.names.index(name)]
            known = np.flatnonzero(np.isin(col, (0.0, 1.0)))
            if np.isfinite(a) and known.size:
                s = project(Z[known], fitter.cavs_[m:m + 1])[:, 0]
                p = 1.0 / (1.0 + np.exp(-(a * s + b)))
                row["transfer"], row["transfer_value"] = "ece", expected_calibration_error(p, col[known])
            else:
                row["transfer"], row["transfer_value"] = "none", float("nan")
        else:
            row["transfer"], row["transfer_value"] = "none", float("nan")


#: positives kept per concept for TCAV's test (concepts.tests.max_set may not exceed it)
TEST_POSITIVES = 1000


def test_positives(fitter, Zex: np.ndarray, examples, seed: int) -> tuple[np.ndarray, list[int]]:
    """Up to :data:`TEST_POSITIVES` positive examples' latents per kept concept (a seeded uniform
    sample, stacked in concept order; float32) and their counts: what TCAV's test fits the concept
    against random example sets with (:mod:`pipeline.app.stages.concept_tests`)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(examples.labels, dtype=np.float64)
    parts, counts = [], []
    for name in fitter.concept_names_:
        pos = np.flatnonzero(labels[:, examples.names.index(name)] == 1)
        if pos.size > TEST_POSITIVES:
            pos = np.sort(rng.choice(pos, TEST_POSITIVES, replace=False))
        parts.append(np.asarray(Zex[pos], dtype=np.float32).reshape(pos.size, -1))
        counts.append(int(pos.size))
    return (np.concatenate(parts) if parts else np.zeros((0, Zex.shape[1]), np.float32)), counts


def measured_calibration(fitter, Z: np.ndarray, names: list[str], measured: dict, summary: list[dict]) -> np.ndarray:
    """The checks of measured concepts on the rows their CAVs were not fitted on (issue 47): each
    summary row gets ``tracks`` (Spearman ρ of the concept coordinate with the measurement on those
    rows) and ``tracks_fit`` (the same on the fitted rows: the in-sample optimism); the returned
    ``(slope, intercept)`` per kept concept is the Platt model of a presence concept's measured
    labels on those rows (NaN for a tertile concept, which reads in percentiles)."""
    from pipeline.concepts.measured_maths import Split, spearman
    from pipeline.concepts.units import calibrate

    values = np.asarray(measured["values"], dtype=np.float64)
    fit = np.asarray(measured["fit_rows"], dtype=bool)
    out = np.full((len(fitter.concept_names_), 2), np.nan)
    S = project(Z, fitter.cavs_)
    for m, (name, row) in enumerate(zip(fitter.concept_names_, summary)):
        j = names.index(name)
        spec = measured["measures"][j]
        s = np.asarray(S[:, m], dtype=np.float64)
        row["tracks"], row["tracks_fit"] = spearman(s[~fit], values[~fit, j]), spearman(s[fit], values[fit, j])
        row["measure"] = f"{spec['description']} ({spec['split']}: positive {spec['positive']})"
        if spec["split"] == "presence":
            split = Split(spec["split"], spec["lo"], spec["hi"], spec["strict"], spec["cut"])
            out[m] = calibrate(s[~fit], split.labels(values[~fit, j]))
    return out


def _fitter_path(fitter) -> str | None:
    """The dotted path of a CAV fitter given as a class, an instance or a path."""
    if isinstance(fitter, str):
        return fitter
    cls = fitter if isinstance(fitter, type) else type(fitter)
    return f"{cls.__module__}.{cls.__qualname__}"


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
                         X: np.ndarray) -> ConceptsArtifact:
    """Keep the concepts chosen by greedy q-maximising selection (``concepts.params.select``).

    Uses the reference mixture when it has one, else the pooled within-cluster spread of
    the concept coordinates ``X`` (= ``Z Cᵀ`` of these concepts, the coordinates stage's).
    Returns ``concepts`` unchanged when selection is off.
    """
    params = cfg["concepts"].get("params") or {}
    if not concepts.enabled or not params.get("select"):
        return concepts
    from pipeline.concepts.selection import select_concepts

    C, names = np.asarray(concepts.cavs), list(concepts.concept_names)
    if cluster.means is not None and cluster.covariances is not None:
        mu, sigma = concept_mixture(C, cluster.means, cluster.covariances, concept_names=names)
    else:
        mu, sigma = pooled_concept_sigma(X, cluster.labels)
    res = select_concepts(mu, sigma, int(params["select"]), names=names, tol=float(params.get("select_tol", 0.0)))
    log.info("concept selection: %s (q %.3f of %.3f with all %d concepts)", res.names, res.q_selected, res.q_all,
             len(names))
    selection = {"selected": res.names, "q_path": res.q_path, "q_all": res.q_all, "all_concepts": names}
    calibration = (None if concepts.cav_calibration is None
                   else np.asarray(concepts.cav_calibration).reshape(-1, 2)[res.selected].tolist())
    return dataclasses.replace(concepts, cavs=C[res.selected], concept_names=res.names, selection=selection,
                               cav_calibration=calibration)


def display_units(cfg: dict, concepts: ConceptsArtifact, X: np.ndarray, names,
                  asked: str | None = None) -> tuple[str, list | None]:
    """(units kind, one display map per concept or None) for the concept coordinates ``X``:
    ``asked`` (``concepts.units``, a report setting the run's plan checked) when set (an error if it
    cannot be honoured), else the concept set's default (probability for calibrated CAVs, percentile
    otherwise; a concept without a usable calibration then reads in percentiles, with a log line)."""
    from pipeline.concepts.units import column_ranges, concept_units, percentile_units, probability_units

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
