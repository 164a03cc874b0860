"""``concepts=discovered``: concepts found in the encoder's own representation.

The concept source of ``conf/concepts/discovered.yaml``. It factors the data's latents
(:class:`pipeline.concepts.discovery.ConceptDiscovery`: NMF for non-negative activations,
FastICA for signed latents), names each concept by its strongest association with what the
run knows (the class labels; ``≈sandal``, AUC 0.93) and returns a finished concepts-stage
artifact: the directions as CAV rows, so the project stage and the trees use them exactly
like CAVs. Cached with the concepts stage (key: the concepts config, the seed, the data and
encoder); the same seed gives the same concepts.

    python -m pipeline dataset=digits concepts=discovered concepts.params.n_concepts=10
    python -m pipeline dataset=digits concepts=discovered concepts.params.names='{concept_0: round}'

(On the command line rename by position, ``concept_j``; in a YAML file the automatic name,
``"≈0": round``, works too.)
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.concepts.discovery import ConceptDiscovery, concept_associations, label_table, name_concepts, top_examples
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def discovered(Z, dataset, cfg: dict, n_concepts: int = 10, method: str = "auto", names: dict | None = None,
               n_examples: int = 8, min_auc: float = 0.6, max_iter: int = 1000, attributes: str | None = None,
               attributes_id_column: str | None = None, attributes_fingerprint=None) -> dict:
    """Discover ``n_concepts`` concepts in the latents ``Z`` of ``dataset`` (seed: ``cfg['seed']``).

    Names come from the class labels and, with ``attributes`` (a 0/1 table with one column per
    attribute and one row per data row, read like a ``concepts=examples`` table; joined on
    ``attributes_id_column`` if given), from its columns too.

    Returns the concepts-stage artifact: ``concept_names``, ``cavs`` (the unit directions),
    ``discovery`` (one row per concept: automatic name, association, AUC, importance, method),
    ``top_examples`` (rows expressing each concept most) and ``concept_set="discovered"``.
    """
    if names is not None and not isinstance(names, dict):
        raise InvalidInputError(f"concepts.params.names must be a map from a discovered concept's name to a new "
                                f"name (e.g. {{'≈0': round}}), got {names!r}.")
    if isinstance(n_concepts, bool) or not isinstance(n_concepts, (int, np.integer)):
        raise InvalidInputError(f"concepts.params.n_concepts must be a whole number, got {n_concepts!r}.")
    Z = np.asarray(Z, dtype=np.float64)
    model = ConceptDiscovery(int(n_concepts), method=method, max_iter=max_iter, random_state=cfg["seed"]).fit(Z)
    coords = model.transform(Z)
    labels = label_table(dataset.y, dataset.class_names) if dataset.y is not None else {}
    if attributes is not None:
        labels.update(_attribute_table(attributes, dataset, attributes_id_column))
    assoc = concept_associations(coords, labels) if labels else [("", float("nan"))] * coords.shape[1]
    auto = name_concepts(assoc, None, min_auc=min_auc)
    final = name_concepts(assoc, names, min_auc=min_auc)
    rows = [{"concept": final[j], "automatic name": auto[j], "associated with": label or None,
             "AUC": auc, "importance": float(model.importance_[j]), "method": model.method_}
            for j, (label, auc) in enumerate(assoc)]
    log.info("discovered concepts (%s): %s", model.method_,
             ", ".join(f"{r['concept']} (AUC {r['AUC']:.2f})" for r in rows))
    return {"concept_names": final, "cavs": model.directions_, "discovery": rows, "concept_set": "discovered",
            "discovery_method": model.method_, "top_examples": top_examples(coords, n_examples),
            "n_concept_examples": int(Z.shape[0])}


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
