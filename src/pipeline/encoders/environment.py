"""What the environment says about model caches and the network (read-only).

The application layer sets these variables (:func:`pipeline.app.environment.configure_model_caches`);
encoders only read them.
"""

from __future__ import annotations

import os

#: environment variables set to "1" when ``offline=True``
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def is_offline() -> bool:
    """True when the offline switch (or HF_HUB_OFFLINE) is on."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def open_clip_cache_dir() -> str | None:
    """The open_clip download directory chosen by :func:`pipeline.app.environment.configure_model_caches`, if any."""
    return os.environ.get("OPEN_CLIP_CACHE_DIR")
