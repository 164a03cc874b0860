"""Stage ``concepts``: dataset + latents -> concept names and CAVs (C, shape (n_concepts, m)).

A no-op (empty artifact) with ``concepts=none``. Concept sets plug in through
:func:`register_concepts`: a builder ``fn(cfg, dataset: Dataset, Z: ndarray (n, m)) -> dict``
returning at least ``{"concept_names": [...], "cavs": ndarray (n_concepts, m)}`` (more arrays /
JSON values are kept in the artifact, e.g. CAV accuracies). ``cfg`` is the whole plain config
(``cfg["concepts"]``, ``cfg["cav"]``, ``cfg["paths"]``, ``cfg["seed"]``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from pipeline.app.registries import Registry, resolve_callable
from pipeline.app.stages.base import Stage
from pipeline.app.stages.load import artifact_to_dataset
from pipeline.validation import InvalidInputError

CONCEPT_BUILDERS = Registry(
    "concept set", "Use concepts=none, a concept set for this data, or register a builder (docs/pipeline.md).")


def register_concepts(name: str, builder: str | Callable) -> None:
    """Register a concept builder (callable or ``"module:function"``) for ``concepts.name``."""
    CONCEPT_BUILDERS.register(name, builder)


def _builder(name: str) -> Callable:
    return resolve_callable(CONCEPT_BUILDERS.lookup(name))


def _config(cfg: dict) -> dict:
    if cfg["concepts"]["name"] == "none":
        return {"concepts": "none"}
    # Concept selection runs in the project stage (pipeline.app.stages.cavs), so it is not part of this key.
    params = {k: v for k, v in (cfg["concepts"].get("params") or {}).items() if k not in ("select", "select_tol")}
    return {"concepts": {**cfg["concepts"], "params": params}, "cav": cfg["cav"], "seed": cfg["seed"]}


def _compute(cfg: dict, load: dict, encode: dict) -> dict:
    if cfg["concepts"]["name"] == "none":
        return {}
    out = dict(_builder(cfg["concepts"]["name"])(cfg, artifact_to_dataset(load), encode["Z"]))
    cavs = np.asarray(out.get("cavs"), dtype=np.float64)
    names = out.get("concept_names")
    if cavs.ndim != 2 or cavs.shape[1] != encode["Z"].shape[1] or names is None or len(names) != len(cavs):
        raise InvalidInputError(
            f"concept builder {cfg['concepts']['name']!r} returned cavs of shape {cavs.shape} and "
            f"{None if names is None else len(names)} names; expected (n_concepts, {encode['Z'].shape[1]}) and one "
            "name per CAV."
        )
    out["cavs"], out["concept_names"] = cavs, [str(n) for n in names]
    return out


CONCEPTS = Stage("concepts", ("load", "encode"), _config, _compute)


# Every concepts/<name>.yaml is a concepts=<name> choice (pipeline.app.stages.cavs, docs/concepts.md).
from pipeline.app.stages.cavs import register_concept_files  # noqa: E402

register_concept_files()
