"""Registry entries given as callables or as lazy ``"module:function"`` strings."""

from __future__ import annotations

import importlib
from typing import Callable


def resolve_callable(target: str | Callable) -> Callable:
    """``target`` itself if callable, else the function named by ``"package.module:function"``
    (imported only now, so a registry can name code whose heavy imports are optional)."""
    if callable(target):
        return target
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
