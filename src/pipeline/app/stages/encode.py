"""Stage ``encode``: dataset -> float32 latents (n, m), plus the encoder's cluster head if any.

Trainable encoders are checkpointed at ``<paths.models_dir>/<encoder name>/<key>.pt`` (key of
the encoder config and the training data): loaded when present, else fitted and saved. The
embeddings' cache key covers the encoder config, the checkpoint's sha256 and the dataset, so a
retrained checkpoint invalidates every embedding computed from the old one.
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path

import numpy as np
from filelock import FileLock

from pipeline.app.cache import StageCache, make_key
from pipeline.app.stages.base import StageOutput
from pipeline.app.stages.load import artifact_to_dataset
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

NAME = "encode"
VERSION = 1
_RUNTIME_FIELDS = ("device", "batch_size")  # do not change the result, so not in the key


def encoder_key_config(cfg: dict) -> dict:
    return {k: v for k, v in cfg["encoder"].items() if k not in _RUNTIME_FIELDS}


def build(cfg: dict):
    """The configured encoder (device / batch_size passed when its constructor takes them)."""
    from pipeline.encoders import ENCODERS, build_encoder

    enc = cfg["encoder"]
    params = dict(enc.get("params") or {})
    factory = ENCODERS.get(enc["name"])
    if factory is not None:
        accepted = inspect.signature(factory).parameters
        for k in _RUNTIME_FIELDS:
            if k in accepted and k not in params:
                params[k] = enc[k]
    try:
        return build_encoder(enc["name"], **params)
    except TypeError as exc:
        raise InvalidInputError(f"encoder={enc['name']}: bad encoder.params {params}: {exc}") from None


def checkpoint_path(cfg: dict, training_key: str) -> Path:
    """``encoder.checkpoint`` if set, else ``<models_dir>/<name>/<key of encoder config + training data>.pt``."""
    enc = cfg["encoder"]
    if enc.get("checkpoint"):
        return Path(enc["checkpoint"]).expanduser()
    key = make_key("checkpoint", encoder_key_config(cfg), [training_key])
    return Path(cfg["paths"]["models_dir"]).expanduser() / enc["name"] / f"{key}.pt"


def _checkpoint_sha(path: Path) -> str:
    from pipeline.encoders.checkpoint import sidecar_path

    try:
        return json.loads(sidecar_path(path).read_text())["sha256"]
    except (OSError, KeyError, ValueError) as exc:
        raise InvalidInputError(f"checkpoint {path} has no readable sidecar with a sha256 ({exc}); "
                                "delete the checkpoint to retrain.") from None


def training_data(cfg: dict, cache: StageCache, load: StageOutput) -> StageOutput:
    """The dataset a trainable encoder is fitted on: split ``encoder.fit_split`` of the same dataset."""
    split = cfg["encoder"].get("fit_split") or cfg["dataset"].get("split")
    if split == cfg["dataset"].get("split"):
        return load
    from pipeline.app.stages.base import execute
    from pipeline.app.stages.load import LOAD

    return execute(LOAD, {**cfg, "dataset": {**cfg["dataset"], "split": split}}, cache, {})


def prepare_encoder(cfg: dict, load: StageOutput, cache: StageCache):
    """(encoder or None, checkpoint path, checkpoint sha256 or None). Trains and saves a trainable
    encoder if needed; an existing checkpoint is loaded later, only if the embeddings are not cached."""
    encoder = build(cfg)
    if not encoder.trainable:
        return encoder, None, None
    train = training_data(cfg, cache, load)
    path = checkpoint_path(cfg, train.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists() and not cache.forced(NAME):
            return None, path, _checkpoint_sha(path)
        if cfg["encoder"].get("checkpoint"):
            raise InvalidInputError(f"encoder.checkpoint={path} does not exist; fix the path or set it to null to train.")
        from pipeline.encoders.checkpoint import save_encoder

        ds = artifact_to_dataset(train.artifact)
        log.info("training %s encoder on %d samples (split %s)", cfg["encoder"]["name"], len(ds),
                 ds.meta.get("split", cfg["encoder"].get("fit_split")))
        encoder.fit(ds.X, None)
        sha = save_encoder(encoder, path, {"key": path.stem, "config": cfg["encoder"], "data": ds.name,
                                           "dataset": cfg["dataset"], "seed": cfg["seed"],
                                           "fit_split": cfg["encoder"].get("fit_split") or cfg["dataset"].get("split")})
        return encoder, path, sha


def embed(encoder, X) -> dict:
    """Latents (checked finite) and, if the encoder has one, its cluster head and mixture prior."""
    from pipeline.encoders.base import Encoder

    Z = np.asarray(encoder.transform(X), dtype=np.float32)
    if Z.ndim != 2 or len(Z) != len(X):
        raise InvalidInputError(f"encoder {encoder.name!r} returned shape {Z.shape}; expected ({len(X)}, m).")
    bad = ~np.isfinite(Z)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise InvalidInputError(
            f"the {encoder.name!r} encoder produced {int(bad.sum())} NaN/inf values in {rows.size} of {len(Z)} "
            f"embeddings (first rows {rows[:5].tolist()}). Check the input data for NaN/inf, the encoder's "
            "training (diverged loss?) or its checkpoint (+force=encode retrains it)."
        )
    out = {"Z": Z}
    if type(encoder).predict_clusters is not Encoder.predict_clusters:
        out["head_labels"] = np.asarray(encoder.predict_clusters(X), dtype=np.int64)
    mix = encoder.mixture()
    if mix is not None:
        out["mixture_weights"], out["mixture_means"], out["mixture_covariances"] = (np.asarray(a, dtype=np.float64)
                                                                                      for a in mix)
    return out


def execute_encode(cfg: dict, cache: StageCache, load: StageOutput) -> StageOutput:
    """Run the encode stage (cached), training or loading a checkpoint as needed."""
    encoder, path, sha = prepare_encoder(cfg, load, cache)
    key_config = {"encoder": encoder_key_config(cfg), "checkpoint_sha256": sha}
    if encoder is not None and encoder.may_substitute_model:
        # SBERT may fall back to another model offline: key on the model actually loaded, so
        # embeddings of different models never share a cache entry.
        encoder.fit(None)
        key_config["model_used"] = encoder.model_used_.split(" (")[0]
    key = make_key(NAME, key_config, [load.key], VERSION)

    def compute():
        nonlocal encoder
        if encoder is None:
            encoder = _load_checkpoint(cfg, path)
        ds = artifact_to_dataset(load.artifact)
        out = embed(encoder, ds.X)
        out["latent_names"] = latent_names(cfg, load.artifact, out["Z"].shape[1])
        out["checkpoint_sha256"] = sha
        return out

    return StageOutput(key, cache.get_or_compute(NAME, key, compute))


def _load_checkpoint(cfg: dict, path: Path):
    from pipeline.encoders.checkpoint import load_encoder

    # an explicitly named checkpoint must fit the configured architecture / K
    return load_encoder(path, expected=build(cfg) if cfg["encoder"].get("checkpoint") else None)


def trained_encoder(cfg: dict, cache: StageCache, load: StageOutput, sha256: str | None = None):
    """The fitted encoder behind the encode stage's latents, never training one.

    Trainable encoders are loaded from the checkpoint the encode stage wrote (or
    ``encoder.checkpoint``); when ``sha256`` (the encode artifact's ``checkpoint_sha256``) is
    given it must match, so the encoder is the one that made the latents. Other encoders are
    built from the config (not fitted: enough for :meth:`Encoder.torch_module`).
    """
    encoder = build(cfg)
    if not encoder.trainable:
        return encoder
    path = checkpoint_path(cfg, training_data(cfg, cache, load).key)
    if not path.exists():
        raise InvalidInputError(f"no {cfg['encoder']['name']} checkpoint at {path}; run the encode stage first "
                                "(it trains and saves the encoder).")
    if sha256 is not None and _checkpoint_sha(path) != sha256:
        raise InvalidInputError(f"checkpoint {path} changed since the latents were computed; rerun with +force=encode.")
    return _load_checkpoint(cfg, path)


def latent_names(cfg: dict, dataset: dict, width: int) -> list[str]:
    """Feature names of the identity encoder on tabular data; else z0..z{m-1}."""
    names = dataset.get("feature_names")
    if cfg["encoder"]["name"] == "identity" and names and len(names) == width:
        return list(names)
    return [f"z{j}" for j in range(width)]
