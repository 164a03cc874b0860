"""``concepts=discovered``: concepts found in the encoder's own representation.

The concept source of ``conf/concepts/discovered.yaml``. It factors the data's latents
(:class:`pipeline.concepts.discovery.ConceptDiscovery`: NMF for non-negative activations,
FastICA for signed latents), names each concept without the labels (texts: the most
distinctive words of the documents expressing it most, ``unsubscribe·offer·click``; tables:
the columns it follows, ``proline+ alcohol+``; images: ``c1``, ``c2`` ... shown by a contact
sheet of their top examples in the report and notebook), keeps its strongest association
with the class labels as a separate column (``≈ Sneaker, AUC .96``) and returns a finished
concepts-stage artifact: the directions as CAV rows, so the project stage and the trees use
them exactly like CAVs. Cached with the concepts stage (key: the concepts config, the seed,
the data and encoder); the same seed gives the same concepts.

    python -m pipeline dataset=digits concepts=discovered concepts.params.n_concepts=5
    python -m pipeline dataset=digits concepts=discovered concepts.params.names='{concept_0: round}'

(On the command line rename by position, ``concept_j``; in a YAML file the automatic name,
``c1: round``, works too.)
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.concepts.discovery import (ConceptDiscovery, association_text, concept_associations, distinctive_words,
                                         label_table, name_concepts, top_columns, top_examples)
from pipeline.app.data.budget import SAMPLES
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


DISCOVERY_ROWS = SAMPLES["discovery"]  # latents on disk: rows the factorisation sees (the row plan's sample)


def discovered(Z, dataset, cfg: dict, n_concepts: int = 5, method: str = "auto", names: dict | None = None,
               n_examples: int = 8, min_auc: float = 0.6, max_iter: int = 1000, attributes: str | None = None,
               attributes_id_column: str | None = None, attributes_fingerprint=None, n_words: int = 3,
               measures="auto", min_rho: float = 0.5) -> dict:
    """Discover ``n_concepts`` concepts in the latents ``Z`` of ``dataset`` (seed: ``cfg['seed']``).

    Names come from the data, never from the labels (see the module docstring); the class labels
    and, with ``attributes`` (a 0/1 table with one column per attribute and one row per data row,
    read like a ``concepts=examples`` table; joined on ``attributes_id_column`` if given), its
    columns give each concept's association (shown when its AUC is at least ``min_auc``).

    Returns the concepts-stage artifact: ``concept_names``, ``cavs`` (the unit directions),
    ``discovery`` (one row per concept: name, what it is named by, association, AUC,
    importance, method), ``top_examples`` (rows expressing each concept most) and
    ``concept_set="discovered"``.
    """
    if names is not None and not isinstance(names, dict):
        raise InvalidInputError(f"concepts.params.names must be a map from a discovered concept's name to a new "
                                f"name (e.g. {{'c1': round}}), got {names!r}.")
    if isinstance(n_concepts, bool) or not isinstance(n_concepts, (int, np.integer)):
        raise InvalidInputError(f"concepts.params.n_concepts must be a whole number, got {n_concepts!r}.")
    notes = []
    from pipeline.app.data.chunked import held

    sample = None
    if held(Z) is None and len(Z) > DISCOVERY_ROWS:  # latents on disk: discovered on a uniform sample of rows
        sample = np.sort(np.random.default_rng(cfg["seed"]).choice(len(Z), DISCOVERY_ROWS, replace=False))
        log.info("discovered concepts: factorised on a uniform sample of %d of %d rows", sample.size, len(Z))
        dataset = dataset.subset(sample)
        Z = Z[sample]
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim == 2 and 1 <= Z.shape[1] < int(n_concepts):
        notes.append(
            f"concepts.params.n_concepts={n_concepts} but the representation has {Z.shape[1]} dimension(s), so a "
            f"factorisation finds at most {Z.shape[1]} concept(s); {Z.shape[1]} found."
            + (" With one dimension the one concept is that dimension itself (its coordinate is the column, up to "
               "sign and scale), so the concept trees are the trees on the column and the name says which column."
               if Z.shape[1] == 1 else f" Set concepts.params.n_concepts<={Z.shape[1]} to silence this note."))
        log.warning("discovered concepts: %s", notes[-1])
        n_concepts = Z.shape[1]
    model = ConceptDiscovery(int(n_concepts), method=method, max_iter=max_iter, random_state=cfg["seed"]).fit(Z)
    coords = model.transform(Z)
    labels = label_table(dataset.y, dataset.class_names) if dataset.y is not None else {}
    if attributes is not None:
        labels.update(_attribute_table(attributes, dataset, attributes_id_column))
    assoc = concept_associations(coords, labels) if labels else [("", float("nan"))] * coords.shape[1]
    top = top_examples(coords, n_examples)
    tracked = measured_tracks(coords, dataset, measures, notes)
    auto, named_by = automatic_names(coords, dataset, n_words, tracked, min_rho)
    final = name_concepts(auto, names)
    rows = [{"concept": final[j], "automatic name": auto[j], "named by": named_by,
             "association": association_text(label, auc, min_auc), "associated with": label or None, "AUC": auc,
             "importance": float(model.importance_[j]), "method": model.method_,
             **({"tracks": track_text(tracked[j])} if tracked is not None else {})}
            for j, (label, auc) in enumerate(assoc)]
    log.info("discovered concepts (%s): %s", model.method_,
             ", ".join(f"{r['concept']} ({r['association'] or 'no labels'})" for r in rows))
    if sample is not None:
        top = sample[top]  # row numbers of the whole data
    return {"concept_names": final, "cavs": model.directions_, "discovery": rows, "concept_set": "discovered",
            "discovery_method": model.method_, "top_examples": top, "n_concept_examples": int(Z.shape[0]),
            "concept_notes": notes or None}


#: the image measurements discovered concepts are described by, by the dataset's name (else silhouettes)
IMAGE_MEASURES = {"mnist": "pipeline.concepts.measures.digits.digit_measurements",
                  "digits": "pipeline.concepts.measures.digits.digit_measurements"}
SILHOUETTES = "pipeline.concepts.measures.silhouettes.silhouette_measurements"


def measured_tracks(coords: np.ndarray, dataset, measures, notes: list) -> list[list[tuple[str, float]]] | None:
    """Per discovered concept of an image dataset, the measured properties its coordinate tracks
    (name, Spearman ρ), strongest first: ``measures`` is ``"auto"`` (digit measurements for MNIST-like
    digits, silhouette measurements for other images), None (none), or a measurement config node
    ``{_target_, params}`` (:mod:`pipeline.app.concept_sets.measured`). None for texts and tables."""
    images = dataset.images if dataset.images is not None else (dataset.X if dataset.kind == "image" else None)
    if images is None or measures is None:
        return None
    if measures == "auto":
        base = str(dataset.name).split("/")[0].split("_")[0]
        measures = {"_target_": IMAGE_MEASURES.get(base, SILHOUETTES)}
    from pipeline.app.concept_sets.measured import run_measure
    from pipeline.concepts.measured_maths import spearman

    got = run_measure("discovered", measures, np.asarray(images), "image", len(images), "images",
                      where="concepts.params.measures")
    if isinstance(got, str):
        notes.append(f"the discovered concepts are not described by measurements: {got}")
        return None
    out = []
    for j in range(coords.shape[1]):
        rhos = [(m.name, spearman(coords[:, j], got.values[:, i])) for i, m in enumerate(got.measures)]
        rhos = [(n, r) for n, r in rhos if r == r]
        out.append(sorted(rhos, key=lambda nr: -abs(nr[1])))
    return out


def track_text(tracks: list[tuple[str, float]], n: int = 2) -> str:
    """``ink+ .81, thickness+ .74``: the measured properties a concept tracks most (signed ρ)."""
    return ", ".join(f"{name}{'+' if r > 0 else '-'} {abs(r):.2f}".replace(" 0.", " .") for name, r in tracks[:n])


def automatic_names(coords: np.ndarray, dataset, n_words: int = 3, tracked=None,
                    min_rho: float = 0.5) -> tuple[list[str], str]:
    """(one name per concept, what the names are made of) from the data alone: texts by the
    distinctive words of each concept's top documents, tables by the columns the concept follows,
    images by the measured properties the concept tracks (``ink+ thickness+``, where the strongest
    Spearman ρ is at least ``min_rho``; else ``c1``, ``c2`` ...)."""
    k = coords.shape[1]
    if tracked is not None:
        names = []
        for j, tr in enumerate(tracked):
            strong = [(n, r) for n, r in tr[:2] if abs(r) >= min_rho]
            names.append(" ".join(f"{n}{'+' if r > 0 else '-'}" for n, r in strong) or f"c{j + 1}")
        return names, (f"the measured properties the concept coordinate tracks (Spearman ρ >= {min_rho}; else its "
                       "position, c1, c2 ...)")
    if dataset.kind == "text" and dataset.X is not None:
        n_top = int(max(10, min(50, len(dataset.X) // 20)))  # the top 5% of the documents, 10 to 50
        words = distinctive_words(dataset.X, top_examples(coords, n_top), n_words)
        return [("·".join(w) if w else f"c{j + 1}") for j, w in enumerate(words)], (
            f"the most distinctive words of the {n_top} documents expressing the concept most (class-based TF-IDF)")
    X = None if dataset.kind in ("image", "text") else np.asarray(dataset.X)
    if X is not None and X.ndim == 2 and X.dtype.kind in "fiub" and X.shape[0] == coords.shape[0]:
        cols = top_columns(coords, X.astype(np.float64), dataset.feature_names, n=2)
        return [(" ".join(c) if c else f"c{j + 1}") for j, c in enumerate(cols)], (
            "the data columns the concept coordinate correlates with most (+ grows with it, - falls)")
    return [f"c{j + 1}" for j in range(k)], "position, c1, c2 ... (their top examples: the contact sheet in report.html)"


def _attribute_table(path, dataset, id_column) -> dict[str, np.ndarray]:
    """The columns of a per-row 0/1 attribute table (``concepts.params.attributes``) by name."""
    from pipeline.app.concept_sets.examples import read_concept_examples

    table = read_concept_examples(path, dataset, id_column=id_column, key="concepts.params.attributes")
    labels = np.asarray(table.labels, dtype=float)
    if table.inputs is not None or labels.ndim != 2 or labels.shape[0] != len(dataset):
        raise InvalidInputError(
            f"concepts.params.attributes={path} must be a table (.csv/.tsv/.parquet) with one 0/1 column per attribute "
            f"and one row per data row ({len(dataset)} rows); got concept examples of another kind. Name the "
            "discovered concepts from it, or leave attributes null to name them from the class labels.")
    labels = np.where(labels < 0, np.nan, labels)  # -1: unknown
    return {str(n): labels[:, j] for j, n in enumerate(table.names)}
