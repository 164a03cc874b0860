"""Encoder checkpoints: a torch state file plus a JSON sidecar (application layer: file I/O).

``<path>.pt`` holds the encoder's full state (module weights, optimizer state, epoch,
history; loadable with ``torch.load(weights_only=True)``); ``<path>.json`` holds the encoder
name and class (``target``), its constructor config, the architecture, seed, epoch, metrics,
caller metadata (data, ...) and the sha256 of the ``.pt`` file, which loading verifies.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline.app.stores.writing import MOVE_MODELS, write_failed
from pipeline.encoders.base import Encoder
from pipeline.encoders.device import select_device
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)


def sidecar_path(path: str | os.PathLike) -> Path:
    """The JSON sidecar of checkpoint ``path`` (same name, ``.json`` suffix)."""
    return Path(path).with_suffix(".json")


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    from pipeline.app.stores.cache import file_digest

    return file_digest(path, "sha256")


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def save_encoder(encoder: Encoder, path: str | os.PathLike, metadata: dict | None = None) -> str:
    """Write ``encoder`` to ``path`` (torch state) and its JSON sidecar; return the sha256.

    Parameters
    ----------
    encoder : TorchEncoder
        A fitted trainable encoder.
    path : path
        Target ``.pt`` file; parent directories are created. Written atomically.
    metadata : dict, optional
        Caller information stored in the sidecar (``data``, ``config``, ``key`` ...). A
        ``metrics`` entry is merged with the encoder's own ``metrics_``.

    Returns
    -------
    str
        Hex sha256 of the written ``.pt`` file.
    """
    if not getattr(encoder, "trainable", False) or not hasattr(encoder, "checkpoint_state"):
        raise InvalidInputError(f"encoder {encoder.name!r} is not trainable and has no checkpoint to save.")
    state = encoder.checkpoint_state()
    metadata = dict(metadata or {})
    metrics = dict(getattr(encoder, "metrics_", {}) or {})
    metrics.update(metadata.pop("metrics", {}) or {})
    sidecar = {
        "encoder": encoder.name, "target": f"{type(encoder).__module__}.{type(encoder).__qualname__}",
        "config": _plain_params(encoder.get_params()), "architecture": encoder.architecture(),
        "seed": state["seed"], "epoch": state["epoch"], "metrics": metrics,
        "seed_report": getattr(encoder, "seed_report_", None), "data": metadata.pop("data", None),
        "metadata": metadata,
    }
    sha = save_state(path, state, sidecar)
    logger.info("saved %s checkpoint %s (epoch %d, sha256 %s)", encoder.name, path, state["epoch"], sha[:12])
    return sha


def _holds_tensors(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensors(v) for v in value)
    return False


def _plain_params(params: dict) -> dict:
    """Constructor parameters for the sidecar: in-memory weights (initial state dicts, read from
    files by :func:`read_weights`) and stores (:class:`StateDir`) are not stored; the checkpoint
    itself holds the trained state."""
    return {k: (None if _holds_tensors(v) or isinstance(v, StateDir) else v) for k, v in params.items()}


class StateDir:
    """A directory of named torch states: what the library's ``load(name)`` / ``save(name, state,
    sidecar)`` stores (VaDE's ``pretrain_cache``) are given, so that the library never opens files.

    ``load`` returns None for a name never saved and verifies the sha256 of one that was.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser()

    def __repr__(self) -> str:
        return f"StateDir({str(self.root)!r})"

    def path(self, name: str) -> Path:
        return self.root / f"{name}.pt"

    def load(self, name: str) -> dict | None:
        path = self.path(name)
        if not path.is_file():
            return None
        return read_checkpoint(path)[0]

    def save(self, name: str, state: dict, sidecar: dict) -> str:
        return save_state(self.path(name), state, sidecar)


def read_weights(path: str | os.PathLike, key: str) -> dict:
    """A weights file (a torch state dict / checkpoint) read with ``torch.load(weights_only=True)``,
    for encoder parameters that take in-memory weights (``weight_params``); ``key`` names the
    config entry in error messages."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InvalidInputError(f"{key}={path} does not exist; point it at a local weights file (a torch state "
                                "dict or checkpoint), or use 'imagenet' / 'none' where the encoder allows them.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise InvalidInputError(f"{key}={path} is not a readable torch file ({type(exc).__name__}: {exc}).") from None


def canonical(value):
    """``value`` rebuilt so that its pickle depends on the values alone, not on which objects
    happen to be shared: containers are rebuilt fresh and strings interned (pickle writes an
    object seen before as a back-reference, so a history read back from a checkpoint, whose
    equal strings are distinct objects, would otherwise pickle to other bytes than the same
    history built in memory). Tensors are kept as they are (torch writes each storage once,
    in order of appearance)."""
    if isinstance(value, dict):
        return {canonical(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if type(value) is str:
        return sys.intern(value)
    return value


def state_bytes(state: dict) -> bytes:
    """The bytes :func:`save_state` writes for ``state``: ``torch.save`` of its :func:`canonical`
    form, so that equal states give equal files (a resumed training's checkpoint has the
    sha256 of an uninterrupted one's)."""
    buffer = io.BytesIO()
    torch.save(canonical(state), buffer)
    return buffer.getvalue()


def save_state(path: str | os.PathLike, state: dict, sidecar: dict) -> str:
    """Write a torch ``state`` to ``path`` and ``sidecar`` (+ the state file's sha256) beside it,
    as one atomic unit.

    Returns the hex sha256 of the ``.pt`` file. ``state`` may hold only tensors and plain
    Python containers/scalars, so that ``torch.load(weights_only=True)`` can read it.

    The ``.pt`` file is the commit point: the state goes to a temporary file (fsynced, hashed),
    an old ``.pt`` is removed, the sidecar is renamed into place, and only then the state file.
    A process killed at any moment therefore leaves either no checkpoint (the next run trains)
    or a checkpoint with its matching sidecar, never a ``.pt`` that blocks later runs.
    """
    path = Path(path)
    try:
        return _save_state(path, state, sidecar)
    except OSError as exc:  # disk full, quota, read-only: the old checkpoint (if any) stays valid
        for tmp in (path.with_name(path.name + ".tmp"), sidecar_path(path).with_name(sidecar_path(path).name + ".tmp")):
            tmp.unlink(missing_ok=True)
        raise write_failed(exc, path.parent, _state_bytes(state), f"the checkpoint {path.name}", MOVE_MODELS) from None


def _state_bytes(value) -> int:
    """About how many bytes ``torch.save`` needs for ``value`` (its tensors, plus 4 KiB)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_state_bytes(v) for v in value.values()) + 4096
    if isinstance(value, (list, tuple)):
        return sum(_state_bytes(v) for v in value)
    return 64


def _save_state(path: Path, state: dict, sidecar: dict) -> str:
    from pipeline.app.stores.cache import fsync_path

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(state_bytes(state))
    fsync_path(tmp)
    sha = file_sha256(tmp)
    st = os.stat(tmp)  # kept through the rename: a warm run trusts the sha256 while size and mtime match
    full = {"format": state.get("format", 1), **sidecar, "sha256": sha, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "torch": torch.__version__}
    side = sidecar_path(path)
    tmp_json = side.with_name(side.name + ".tmp")
    with open(tmp_json, "w") as fh:
        fh.write(json.dumps(_jsonable(full), indent=2, sort_keys=True))
        fh.flush()
        os.fsync(fh.fileno())
    path.unlink(missing_ok=True)  # an old state file must never sit beside the new sidecar
    os.replace(tmp_json, side)
    os.replace(tmp, path)
    fsync_path(path.parent)
    return sha


def remove_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete what a killed :func:`save_state` may have left next to checkpoint ``path``
    (call it while holding the checkpoint's lock); returns the removed files."""
    path = Path(path)
    removed = []
    for tmp in (path.with_name(path.name + ".tmp"), sidecar_path(path).with_name(sidecar_path(path).name + ".tmp")):
        if tmp.exists():
            tmp.unlink()
            removed.append(tmp)
    if not path.exists() and sidecar_path(path).exists():  # killed between the two renames
        sidecar_path(path).unlink()
        removed.append(sidecar_path(path))
    return removed


def read_checkpoint(path: str | os.PathLike, expected: dict | None = None) -> tuple[dict, dict]:
    """Verify and read a checkpoint; return ``(state, sidecar)``.

    Parameters
    ----------
    path : path
        The ``.pt`` file written by :func:`save_encoder`.
    expected : dict, optional
        An architecture (see ``TorchEncoder.architecture``); every key present in both must match.

    Raises
    ------
    InvalidInputError
        Missing file or sidecar, sha256 mismatch (corrupted or replaced file), unreadable
        state, or an architecture / K different from ``expected``.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise InvalidInputError(f"checkpoint {path} does not exist; check encoder.checkpoint / the models_dir path.")
    if not side.is_file():
        raise InvalidInputError(f"checkpoint {path} has no JSON sidecar {side}; it was not written by save_encoder. "
                                "Retrain (delete the .pt) or restore the sidecar.")
    try:
        sidecar = json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"sidecar {side} is not valid JSON ({exc}); delete {path} and its sidecar to retrain.") from None
    from pipeline.app.stores.cache import checked_sha256

    checked_sha256(path, sidecar.get("sha256"), side.name)
    if expected is not None:
        check_architecture(sidecar.get("architecture", {}), expected, path)
    written_by = sidecar.get("torch")
    other_torch = written_by is not None and written_by != torch.__version__
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means an unusable file
        by = f" (written by torch {written_by}; this is torch {torch.__version__})" if other_torch else ""
        raise InvalidInputError(f"checkpoint {path} could not be read with torch.load(weights_only=True){by}: {exc}; "
                                "rerun with +force=train to retrain it, or delete it.") from None
    if other_torch:
        logger.warning("checkpoint %s was written by torch %s, this is torch %s: the weights load, but results "
                       "computed from them may differ in the last bits from the original machine's; rerun with "
                       "+force=train to retrain here", path, written_by, torch.__version__)
    return state, sidecar


def check_architecture(found: dict, expected: dict, path) -> None:
    """Raise if a checkpoint's architecture differs from the configured one on any shared key."""
    diffs = [(k, found[k], expected[k]) for k in expected if k in found and _norm(found[k]) != _norm(expected[k])]
    if diffs:
        text = ", ".join(f"{k}={f!r} in the checkpoint but {e!r} configured" for k, f, e in diffs)
        raise InvalidInputError(
            f"checkpoint {path} does not fit the configured encoder: {text}. Change encoder.{diffs[0][0]} to match, "
            "point the encoder at a checkpoint trained with this configuration, or delete the file to retrain."
        )


def _norm(value):
    return [_norm(v) for v in value] if isinstance(value, (list, tuple)) else value


def load_encoder(path: str | os.PathLike, expected: Encoder | dict | None = None, device: str | None = None) -> Encoder:
    """Rebuild the encoder saved at ``path`` (hash verified, ``weights_only=True``).

    Parameters
    ----------
    path : path
        A ``.pt`` file written by :func:`save_encoder`.
    expected : Encoder or dict, optional
        The configured encoder (or its architecture dict); the checkpoint must match it
        (same encoder type, n_clusters, layer sizes, ...).
    device : str, optional
        Device to load onto; default: the training device if available here, else "auto".

    Returns
    -------
    Encoder
        The fitted encoder; its ``epoch_`` is logged.
    """
    if isinstance(expected, Encoder):
        expected = {"encoder": expected.name, **_configured_architecture(expected)}
    state, sidecar = read_checkpoint(path, expected=expected)
    if "encoder" not in sidecar or "config" not in sidecar:
        raise InvalidInputError(f"sidecar of {path} lacks 'encoder'/'config'; delete the checkpoint to retrain.")
    config = dict(sidecar["config"])
    if device is not None:
        config["device"] = device
    elif "device" in config:
        try:
            select_device(config["device"])
        except InvalidInputError:  # e.g. trained on cuda, loaded on a CPU-only machine
            config["device"] = "auto"
    from pipeline.app.configuration.instantiate import locate

    target = sidecar.get("target") or _LEGACY_TARGETS.get(sidecar["encoder"])
    if target is None:
        raise InvalidInputError(f"sidecar of {path} names no encoder class ('target'); delete the checkpoint to retrain.")
    encoder = locate(target, "encoder")(**config)
    try:
        encoder._restore(state)
    except (RuntimeError, KeyError) as exc:
        raise InvalidInputError(f"checkpoint {path} does not match the {sidecar['encoder']} architecture in its "
                                f"sidecar ({exc}); delete it to retrain.") from None
    encoder.metrics_ = sidecar.get("metrics", {})
    encoder.seed_report_ = sidecar.get("seed_report")
    encoder.checkpoint_sha256_ = sidecar["sha256"]
    logger.info("loaded %s checkpoint %s (epoch %d, sha256 %s)", sidecar["encoder"], path, encoder.epoch_,
                sidecar["sha256"][:12])
    return encoder


# checkpoints written before sidecars named the class
_LEGACY_TARGETS = {"vade": "pipeline.encoders.vade.VaDEEncoder",
                   "contrastive": "pipeline.encoders.contrastive.ContrastiveClusteringEncoder"}


def _configured_architecture(encoder: Encoder) -> dict:
    """Architecture keys derivable from the configuration alone (no data needed)."""
    keys = getattr(encoder, "architecture_params", ())
    return {k: getattr(encoder, k) for k in keys}
