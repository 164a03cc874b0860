"""Name -> entry registries (dataset loaders, concept builders, explainers, encoders).

Entries may be lazy ``"package.module:function"`` strings so that a registry can name code
whose heavy imports are optional.
"""

from __future__ import annotations

import importlib
from typing import Callable

from pipeline.validation import InvalidInputError


class Registry(dict):
    """A dict of named entries whose lookup of an unknown name lists the registered ones.

    Parameters
    ----------
    what : str
        What an entry is, for messages ("dataset loader").
    hint : str
        How to fix an unknown name, appended to the message.
    entries : mapping, optional
        Initial entries.
    """

    def __init__(self, what: str, hint: str, entries=()):
        super().__init__(entries)
        self.what = what
        self.hint = hint

    def register(self, name: str, entry) -> None:
        """Add (or replace) ``name``."""
        self[name] = entry

    def lookup(self, name: str):
        """The entry ``name``; InvalidInputError naming the registered ones if there is none."""
        if name not in self:
            raise InvalidInputError(f"unknown {self.what} {name!r}; registered: {sorted(self)}. {self.hint}")
        return self[name]


def resolve_callable(target: str | Callable) -> Callable:
    """``target`` itself if callable, else the function named by ``"package.module:function"``
    (imported only now)."""
    if callable(target):
        return target
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)
