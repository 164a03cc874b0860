"""Device choice, seeding and mixed precision for the torch encoders."""

from __future__ import annotations

import contextlib
import logging
import random

import numpy as np
import torch

from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

_DEVICES = ("auto", "cpu", "cuda", "mps")


def select_device(preference: str = "auto") -> torch.device:
    """Resolve a device name: ``"auto"`` picks cuda, then mps, then cpu.

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda", "mps"} or a torch device string such as ``"cuda:1"``

    Returns
    -------
    torch.device
    """
    pref = str(preference).lower()
    if pref == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = pref.split(":")[0]
    if kind not in _DEVICES:
        raise InvalidInputError(f"unknown device {preference!r}; set encoder.device to one of {list(_DEVICES)}.")
    if kind == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError("encoder.device='cuda' but CUDA is not available here; set encoder.device=auto or cpu.")
    index = pref.split(":")[1] if ":" in pref else ""
    if kind == "cuda" and index.isdigit() and int(index) >= torch.cuda.device_count():
        # torch accepts any ordinal here and fails later, deep inside, with "invalid device ordinal"
        raise InvalidInputError(f"encoder.device={preference!r} but this machine has {torch.cuda.device_count()} CUDA "
                                "device(s); set encoder.device=cuda (the first), auto or cpu.")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise InvalidInputError("encoder.device='mps' but MPS is not available here; set encoder.device=auto or cpu.")
    return torch.device(pref)


def seed_everything(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a CPU ``torch.Generator`` seeded with ``seed``.

    On CPU this makes training bit-for-bit reproducible for a fixed thread count.
    """
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: derive numpy/python seeds from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def autocast(device: torch.device, enabled: bool):
    """Mixed precision (float16 autocast) on CUDA only; a no-op context elsewhere."""
    if enabled and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def grad_scaler(device: torch.device, enabled: bool) -> torch.amp.GradScaler:
    """A GradScaler active only for CUDA mixed precision."""
    return torch.amp.GradScaler("cuda", enabled=bool(enabled and device.type == "cuda"))
