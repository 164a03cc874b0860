"""Pipeline glue for concept sets: config -> concept examples -> latents -> fitted CAVs.

Registered with the ``concepts`` stage (:mod:`pipeline.app.stages.concepts`) for every YAML
file in ``concepts/``; the stage caches the result under a key made of the concept and
CAV configs, the seed and the dataset + encoder keys, so CAVs are cached per encoder,
concept set and fitter. Optional concept selection (``concepts.params.select=<max>``)
runs in the ``project`` stage through :func:`select_for_reference`, since it needs the
reference mixture.

Config (``conf/concepts/<name>.yaml``, ``conf/cav/<name>.yaml``)::

    concepts: {name: mnist_geometric, file: null, params: {source: classes, select: null, ...}}
    cav: {name: logistic, params: {n_repeats: 5, max_per_class: 1000, cv: 3, ...}}

``concepts.params`` keys other than ``select`` / ``select_tol`` override the concept
file (``source``, ``subset``, ``root``, ``download``, ``min_positives``...).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.concepts import (
    CAVFitter,
    build_examples,
    concept_mixture,
    load_concept_spec,
    pooled_concept_sigma,
    select_concepts,
)
from pipeline.concepts.sets import CONCEPTS_DIR
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

_STAGE_ONLY = ("select", "select_tol")  # concepts.params used here, not by the concept file
CAV_PARAMS = ("fitter_params", "n_repeats", "max_per_class", "subsample", "cv", "min_positives", "alpha",
              "duplicate_tol")


def register_concept_files(concepts_dir: Path = CONCEPTS_DIR) -> None:
    """Make every ``concepts/<name>.yaml`` a ``concepts=<name>`` choice of the concepts stage."""
    from pipeline.app.stages.concepts import register_concepts

    for path in sorted(Path(concepts_dir).glob("*.yaml")):
        register_concepts(path.stem, build_cavs)


def fitter_name(cfg: dict, suggested: str | None) -> str:
    """``cav.name``; ``linear`` (the default) means the concept set's suggestion, else logistic."""
    name = cfg["cav"]["name"]
    return (suggested or "logistic") if name == "linear" else name


def example_latents(cfg: dict, dataset, Z: np.ndarray, examples) -> np.ndarray:
    """Latents of the concept examples: the data's own latents, or the examples embedded by
    the data's encoder (text prompts go through its text tower when it has one)."""
    if examples.inputs is None:
        if examples.labels.shape[0] != Z.shape[0]:
            raise InvalidInputError(f"concept labels cover {examples.labels.shape[0]} examples but the data has "
                                    f"{Z.shape[0]} latents.")
        return Z
    encoder = _data_encoder(cfg)
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


def _data_encoder(cfg: dict):
    """The configured encoder, loaded from its checkpoint when it is trainable."""
    from pipeline.app.stages.encode import build, checkpoint_path
    from pipeline.app.stages.load import LOAD

    encoder = build(cfg)
    if not encoder.trainable:
        return encoder
    from pipeline.encoders.checkpoint import load_encoder

    path = checkpoint_path(cfg, LOAD.key(cfg, {}))
    if not path.exists():
        raise InvalidInputError(f"no checkpoint of encoder={cfg['encoder']['name']} at {path} to embed the concept "
                                "examples; run the pipeline once so the encoder is trained.")
    return load_encoder(path)


def build_cavs(cfg: dict, dataset, Z: np.ndarray) -> dict:
    """Concepts-stage builder: concept examples of ``dataset``, their latents, fitted CAVs."""
    ccfg = cfg["concepts"]
    params = {k: v for k, v in (ccfg.get("params") or {}).items() if k not in _STAGE_ONLY}
    spec = load_concept_spec(ccfg.get("file") or ccfg["name"])
    params.setdefault("data_dir", cfg["paths"].get("data_dir"))
    examples = build_examples(spec, dataset, **params)
    return fit_cavs(cfg, examples, example_latents(cfg, dataset, Z, examples))


def fit_cavs(cfg: dict, examples, Zex: np.ndarray) -> dict:
    """CAVs of ``examples`` (a :class:`ConceptExamples`) fitted on their latents ``Zex``
    with the ``cav`` config: the concepts-stage artifact."""
    cav_params = dict(cfg["cav"].get("params") or {})
    unknown = sorted(set(cav_params) - set(CAV_PARAMS))
    if unknown:
        raise InvalidInputError(f"unknown cav.params {unknown}; valid keys: {list(CAV_PARAMS)}.")
    if "n_prompts" in examples.meta:  # text prompts, a handful per concept: no CV / test, no minimum count
        log.info("text prompts: CAVs without held-out accuracy or significance test (too few examples)")
        cav_params.update(min_positives=1, cv=0)
    fitter = CAVFitter(fitter=fitter_name(cfg, examples.fitter), random_state=cfg["seed"], progress=True, **cav_params)
    fitter.fit(Zex, examples.labels, examples.names)
    summary = fitter.summary()
    log.info("CAVs: %s", ", ".join(f"{r['concept']}={r['score']:.3f}" for r in summary))
    return {
        "concept_names": fitter.concept_names_, "cavs": fitter.cavs_, "cav_summary": summary,
        "cav_dropped": fitter.dropped_, "cav_scores": fitter.scores_, "cav_random_scores": fitter.random_scores_,
        "concept_set": examples.set_name, "cav_fitter": fitter_name(cfg, examples.fitter),
        "n_concept_examples": int(Zex.shape[0]),
    }


def select_for_reference(cfg: dict, concepts: dict, cluster: dict, Z: np.ndarray) -> dict:
    """Keep the concepts chosen by greedy q-maximising selection (``concepts.params.select``).

    Uses the reference mixture when it has one, else the pooled within-cluster spread of
    the concept coordinates ``Z Cᵀ``. Returns ``concepts`` unchanged when selection is off.
    """
    params = cfg["concepts"].get("params") or {}
    if not concepts or not params.get("select"):
        return concepts
    C, names = np.asarray(concepts["cavs"]), list(concepts["concept_names"])
    if cluster.get("means") is not None and cluster.get("covariances") is not None:
        mu, sigma = concept_mixture(C, cluster["means"], cluster["covariances"], concept_names=names)
    else:
        mu, sigma = pooled_concept_sigma(np.asarray(Z, dtype=np.float64) @ C.T, cluster["labels"])
    res = select_concepts(mu, sigma, int(params["select"]), names=names, tol=float(params.get("select_tol", 0.0)))
    log.info("concept selection: %s (q %.3f of %.3f with all %d concepts)", res.names, res.q_selected, res.q_all,
             len(names))
    out = dict(concepts)
    out["cavs"], out["concept_names"] = C[res.selected], res.names
    out["selection"] = {"selected": res.names, "q_path": res.q_path, "q_all": res.q_all, "all_concepts": names}
    return out
