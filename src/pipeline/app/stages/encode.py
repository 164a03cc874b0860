"""Stages ``train`` and ``encode``: the fitted encoder, then dataset -> float32 latents (n, m).

``train`` builds the encoder from ``encoder._target_``. A trainable one is checkpointed at
``<paths.models_dir>/<encoder name>/<key>.pt`` (key of the encoder config and the training
data, split ``encoder.fit_split``): loaded when present, else fitted and saved. Its artifact
(not cached: the checkpoint file is the product) carries the checkpoint path and sha256, and
its key is the sha256, so a retrained checkpoint invalidates everything computed from the old
one. ``encode`` embeds the data; its artifact carries the latents, the encoder's cluster head
and mixture prior if any, and again the checkpoint path + sha256, which is all later stages
(concepts, counterfactuals) need to get the same encoder back (:func:`fitted_encoder`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
from pathlib import Path

import numpy as np

from pipeline.app.artifacts import EncodeArtifact, LoadArtifact, TrainArtifact
from pipeline.app.cache import checked_sha256, localize, make_key, portable
from pipeline.app.instantiate import call, factory
from pipeline.app.stages.framework import RunContext, Stage, execute
from pipeline.app.stages.load import LOAD, artifact_to_dataset
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

_RUNTIME_FIELDS = ("device", "batch_size")  # do not change the result, so not in the key


def encoder_key_config(cfg: dict) -> dict:
    return {k: v for k, v in cfg["encoder"].items() if k not in _RUNTIME_FIELDS}


def build(cfg: dict):
    """The configured encoder, unfitted (``device`` / ``batch_size`` passed when its class takes them)."""
    enc = cfg["encoder"]
    encoder = call(_with_weight_files(factory(enc, "encoder")), "encoder",
                   offered={k: enc[k] for k in _RUNTIME_FIELDS if k in enc})
    if getattr(encoder, "fetches_weights", False):  # pipeline.app.weights' encoders
        from pipeline.app.network import needs_hub, prepare_hub_access

        if needs_hub(encoder):  # an unreachable hub: offline mode within ~2 s instead of minutes of retries
            prepare_hub_access(cfg.get("offline"), f"{enc['name']} weights")
    return encoder


def _looks_like_file(value) -> bool:
    return isinstance(value, str) and (os.sep in value or Path(value).suffix in (".pt", ".pth", ".tar", ".bin")
                                       or Path(value).expanduser().is_file())


def _with_weight_files(fn: functools.partial) -> functools.partial:
    """Library encoders never open files or download; the app turns file parameters into what they
    take: weights files named in the class's ``weight_params`` are read (in-memory state dicts),
    ``imagenet`` becomes a provider that fetches torchvision's weights when training asks, and
    directories named in ``store_params`` become :class:`pipeline.app.checkpoint.StateDir` stores."""
    weight_params = getattr(fn.func, "weight_params", ())
    weights = {k: v for k, v in fn.keywords.items() if k in weight_params and _looks_like_file(v)}
    stores = {k: v for k, v in fn.keywords.items() if k in getattr(fn.func, "store_params", ()) and isinstance(v, str)}
    imagenet = {k: v for k, v in fn.keywords.items() if k in weight_params and v == "imagenet"}
    if not weights and not stores and not imagenet:
        return fn
    from pipeline.app.checkpoint import StateDir, read_weights
    from pipeline.app.weights import imagenet_weights

    given = {**{k: read_weights(v, f"encoder.params.{k}") for k, v in weights.items()},
             **{k: StateDir(v) for k, v in stores.items()}}
    if imagenet:  # the backbone the weights are for (the class's default unless configured)
        backbone = fn.keywords.get("backbone") or inspect.signature(fn.func).parameters["backbone"].default
        given.update({k: imagenet_weights(backbone) for k in imagenet})
    return functools.partial(fn.func, *fn.args, **{**fn.keywords, **given})


def checkpoint_path(cfg: dict, training_key: str) -> Path:
    """``encoder.checkpoint`` if set, else ``<models_dir>/<name>/<key of encoder config + training data>.pt``."""
    enc = cfg["encoder"]
    if enc.get("checkpoint"):
        return Path(enc["checkpoint"]).expanduser()
    key = make_key("checkpoint", portable(encoder_key_config(cfg), cfg["paths"]), [training_key])
    return Path(cfg["paths"]["models_dir"]).expanduser() / enc["name"] / f"{key}.pt"


def _sidecar(path: Path) -> Path:
    """:func:`pipeline.app.checkpoint.sidecar_path` without importing that module (it imports torch)."""
    return Path(path).with_suffix(".json")


def _checkpoint_sha(path: Path) -> str:
    """The checkpoint's sha256: the sidecar's while the file's size and mtime are the recorded
    ones (no re-hash on a warm run), else hashed again and checked against the sidecar."""
    try:
        sidecar = json.loads(_sidecar(path).read_text())
        recorded = sidecar["sha256"]
        st = os.stat(path)
    except (OSError, KeyError, ValueError) as exc:
        raise InvalidInputError(f"checkpoint {path} has no readable sidecar with a sha256 ({exc}); "
                                "delete the checkpoint to retrain.") from None
    if (sidecar.get("size"), sidecar.get("mtime_ns")) == (st.st_size, st.st_mtime_ns):
        return recorded
    return checked_sha256(path, recorded, _sidecar(path).name)


def fit_split(cfg: dict) -> str | None:
    return cfg["encoder"].get("fit_split") or cfg["dataset"].get("split")


def _declared_frozen(cfg: dict) -> bool:
    """True when ``encoder._target_`` declares itself not trainable and never substituting its model
    (class attributes ``trainable`` / ``may_substitute_model``, or the same on a factory function)."""
    from pipeline.app.instantiate import locate

    target = locate(cfg["encoder"]["_target_"], "encoder")
    return getattr(target, "trainable", None) is False and getattr(target, "may_substitute_model", True) is False


def _train(cfg: dict, load: LoadArtifact, ctx: RunContext) -> TrainArtifact:
    """The encoder behind the latents: built, or loaded / trained through its checkpoint file."""
    from filelock import FileLock

    split = fit_split(cfg)
    train_cfg = cfg if split == cfg["dataset"].get("split") else {**cfg, "dataset": {**cfg["dataset"], "split": split}}
    forced = ctx.cache.forced("encode") or ctx.cache.forced("train")
    if not cfg["encoder"].get("checkpoint") and not forced:
        # a finished checkpoint at the path this config's training would write (only a trainable
        # encoder writes one): the same answer as below without building the encoder, so a fully
        # cached run does not import torch (issue 17)
        path = checkpoint_path(cfg, LOAD.key(train_cfg, {}))
        if path.exists() and _sidecar(path).exists():
            return TrainArtifact(checkpoint=str(path), checkpoint_sha256=_checkpoint_sha(path))
    if not forced and _declared_frozen(cfg):
        # a pretrained encoder that is never fitted (EfficientNet, encoder=torch, CLIP): built only when
        # a stage computes with it, so a warm run does not load the network (issue 24: warm <= 5 s)
        return TrainArtifact()
    encoder = build(cfg)
    out = {"encoder": encoder, "checkpoint": None, "checkpoint_sha256": None, "model_used": None}
    if not encoder.trainable:
        if encoder.may_substitute_model:
            # SBERT may fall back to another model offline: key on the model actually loaded, so
            # embeddings of different models never share a cache entry.
            encoder.fit(None)
            out["model_used"] = encoder.model_used_.split(" (")[0]
        return TrainArtifact(**out)
    train = execute(LOAD, train_cfg, ctx, {})  # the same stage, cached under the training split's key
    path = checkpoint_path(cfg, train.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        from pipeline.app.checkpoint import remove_temporaries

        remove_temporaries(path)  # left by a run killed while saving
        if path.exists() and not forced:
            out.update(encoder=None, checkpoint=str(path), checkpoint_sha256=_checkpoint_sha(path))
            return TrainArtifact(**out)  # loaded later, only if the embeddings are not cached
        if cfg["encoder"].get("checkpoint"):
            raise InvalidInputError(f"encoder.checkpoint={path} does not exist; fix the path or set it to null to train.")
        from pipeline.app.checkpoint import save_encoder

        ds = artifact_to_dataset(train.artifact)
        log.info("training %s encoder on %d samples (split %s)", cfg["encoder"]["name"], len(ds), split)
        fit_with_epoch_checkpoints(encoder, ds.X, path, restart=forced)
        sha = save_encoder(encoder, path, {"key": path.stem, "config": cfg["encoder"], "data": ds.name,
                                           "dataset": cfg["dataset"], "seed": cfg["seed"], "fit_split": split})
        discard_partial(path)
    out.update(checkpoint=str(path), checkpoint_sha256=sha)
    return TrainArtifact(**out)


def partial_path(path: Path) -> Path:
    """Where the last finished epoch of a training in progress is kept (beside the final checkpoint)."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def discard_partial(path: Path) -> None:
    from pipeline.app.checkpoint import remove_temporaries, sidecar_path

    partial = partial_path(path)
    partial.unlink(missing_ok=True)
    sidecar_path(partial).unlink(missing_ok=True)
    remove_temporaries(partial)


def fit_with_epoch_checkpoints(encoder, X, path: Path, restart: bool = False) -> None:
    """``encoder.fit(X)`` saving a full-state checkpoint after every epoch of its main phase, and
    resuming from the last one a killed run left (same weights as an uninterrupted training).

    Resuming needs a single seed (``n_init=1``): with several, the finished seeds are not in the
    epoch checkpoint, so training restarts.
    """
    import inspect

    from pipeline.app.checkpoint import read_checkpoint, save_state

    if not {"resume_state", "epoch_callback"} <= set(inspect.signature(encoder.fit).parameters):
        encoder.fit(X, None)  # an encoder without epoch checkpoints trains in one go
        return
    partial = partial_path(path)
    resume = None
    if restart:
        discard_partial(path)
    elif partial.exists():
        try:
            if int(getattr(encoder, "n_init", 1) or 1) != 1:
                raise InvalidInputError("n_init > 1")
            resume, _ = read_checkpoint(partial)
            log.warning("resuming %s training from epoch %d (checkpoint %s left by an interrupted run)",
                        encoder.name, int(resume["epoch"]), partial)
        except InvalidInputError as exc:
            log.warning("not resuming from %s (%s); training from the start", partial, exc)
            discard_partial(path)

    def save_epoch(enc) -> None:
        save_state(partial, enc.checkpoint_state(), {"encoder": enc.name, "epoch": enc.epoch_, "seed": enc.seed_,
                                                     "note": "epoch checkpoint of a training in progress"})

    encoder.fit(X, None, resume_state=resume, epoch_callback=save_epoch)


def _train_key(key: str, artifact: TrainArtifact) -> str:
    return make_key("train", {"checkpoint_sha256": artifact.checkpoint_sha256, "model_used": artifact.model_used},
                    [key])


TRAIN = Stage("train", ("load",), encoder_key_config, _train, cached=False, context=True, output_key=_train_key,
              artifact=TrainArtifact)


def fitted_encoder(cfg: dict, artifact: TrainArtifact | EncodeArtifact):
    """The fitted encoder behind an encode (or train) artifact, never training one.

    Trainable encoders are loaded from the checkpoint the artifact names, which must still have
    the sha256 the artifact recorded (so it is the encoder that made the latents). Other
    encoders are built from the config (not fitted: enough for :meth:`Encoder.torch_module`).
    """
    if isinstance(artifact, TrainArtifact) and artifact.encoder is not None:
        return artifact.encoder
    if not artifact.checkpoint:
        return build(cfg)
    path = Path(localize(artifact.checkpoint, cfg["paths"]))
    if not path.exists():
        raise InvalidInputError(f"no {cfg['encoder']['name']} checkpoint at {path} any more; rerun with +force=encode "
                                "to retrain it.")
    if _checkpoint_sha(path) != artifact.checkpoint_sha256:
        raise InvalidInputError(f"checkpoint {path} changed since the latents were computed; rerun with +force=encode.")
    from pipeline.app.checkpoint import load_encoder

    # an explicitly named checkpoint must fit the configured architecture / K
    return load_encoder(path, expected=build(cfg) if cfg["encoder"].get("checkpoint") else None)


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


def latent_names(cfg: dict, dataset: LoadArtifact, width: int) -> list[str]:
    """Feature names of the identity encoder on tabular data; else z0..z{m-1}."""
    names = dataset.feature_names
    if cfg["encoder"]["name"] == "identity" and names and len(names) == width:
        return list(names)
    return [f"z{j}" for j in range(width)]


def _encode_config(cfg: dict) -> dict:
    return {"encoder": encoder_key_config(cfg)}


def passes_through(cfg: dict) -> bool:
    """The identity encoder on an array read by row range: the latents are that array, read as
    float32 (no copy in memory or in the cache)."""
    from pipeline.app.stages.load import reads_by_row_range

    return cfg["encoder"].get("_target_") == "pipeline.encoders.base.IdentityEncoder" and reads_by_row_range(cfg)


def _encode(cfg: dict, load: LoadArtifact, train: TrainArtifact) -> EncodeArtifact:
    from pipeline.app.data.chunked import is_view

    if is_view(load.X) and cfg["encoder"].get("_target_") == "pipeline.encoders.base.IdentityEncoder":
        return EncodeArtifact(Z=load.X.as_dtype(np.float32), latent_names=latent_names(cfg, load, load.X.shape[1]))
    encoder = fitted_encoder(cfg, train)
    out = embed(encoder, load.inputs)
    # the path relative to paths.models_dir: the cached artifact survives moving the models directory
    return EncodeArtifact(**out, latent_names=latent_names(cfg, load, out["Z"].shape[1]),
                          checkpoint=portable(train.checkpoint, cfg["paths"]) if train.checkpoint else None,
                          checkpoint_sha256=train.checkpoint_sha256)


ENCODE = Stage("encode", ("load", "train"), _encode_config, _encode, version=2, artifact=EncodeArtifact,
               cached=lambda cfg: not passes_through(cfg))

__all__ = ["TRAIN", "ENCODE", "build", "checkpoint_path", "embed", "fitted_encoder", "latent_names"]
