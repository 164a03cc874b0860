"""One cache root for every model library, and an offline switch (application layer: it
changes ``os.environ``).

The runner calls :func:`configure_model_caches` once, before any encoder loads weights.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["configure_model_caches", "OFFLINE_VARIABLES", "is_offline", "open_clip_cache_dir"]

#: environment variables set to "1" when ``offline=True``
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def is_offline() -> bool:
    """True when the offline switch (or HF_HUB_OFFLINE) is on."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def open_clip_cache_dir() -> str | None:
    """The open_clip download directory chosen by :func:`configure_model_caches`, if any."""
    return os.environ.get("OPEN_CLIP_CACHE_DIR")


def configure_model_caches(cache_root: str | os.PathLike | None, offline: bool | None = False) -> dict[str, str]:
    """Point torch hub, Hugging Face, open_clip and sentence-transformers at one cache root.

    Parameters
    ----------
    cache_root : path or None
        Directory under which each library gets a sub-directory (``torch/``, ``huggingface/``,
        ``open_clip/``, ``sentence_transformers/``). None leaves the cache locations alone.
    offline : bool
        Set ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` and ``HF_DATASETS_OFFLINE`` so no
        library tries the network (loading then uses local caches / local files only).
        None leaves those variables as the environment has them.

    Returns
    -------
    dict
        The environment variables that were set, name -> value.
    """
    env: dict[str, str] = {}
    if cache_root is not None:
        root = Path(cache_root).expanduser().resolve()
        env.update(
            TORCH_HOME=str(root / "torch"),
            HF_HOME=str(root / "huggingface"),
            HF_HUB_CACHE=str(root / "huggingface" / "hub"),
            SENTENCE_TRANSFORMERS_HOME=str(root / "sentence_transformers"),
            OPEN_CLIP_CACHE_DIR=str(root / "open_clip"),
        )
        for key in ("TORCH_HOME", "HF_HOME", "SENTENCE_TRANSFORMERS_HOME", "OPEN_CLIP_CACHE_DIR"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
    if offline is not None:
        for key in OFFLINE_VARIABLES:
            env[key] = "1" if offline else "0"
    os.environ.update(env)
    _sync_imported_libraries(env, is_offline() if offline is None else offline)
    logger.info("model caches: root=%s offline=%s", cache_root, offline)
    return env


def _sync_imported_libraries(env: dict[str, str], offline: bool) -> None:
    """huggingface_hub reads its settings at import time; update them if it is already imported."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = bool(offline)
        if "HF_HUB_CACHE" in env:
            constants.HF_HUB_CACHE = env["HF_HUB_CACHE"]
            constants.HF_HOME = env["HF_HOME"]


