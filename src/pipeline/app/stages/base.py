"""The stage framework: a stage is a function from its inputs' artifacts to an artifact.

A :class:`Stage` declares its name, the stages it reads, the part of the config that
determines its output, and ``compute``. :func:`execute` derives the cache key from that
config part and the inputs' keys, and returns the cached artifact or computes and stores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pipeline.app.cache import Artifact, StageCache, make_key


@dataclass(frozen=True)
class StageOutput:
    """A finished stage: its cache key and artifact (a flat dict of arrays and JSON values)."""

    key: str
    artifact: Artifact


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline.

    Attributes
    ----------
    name : str
        Also the cache sub-directory and the name used by ``+force=<name>``.
    inputs : tuple of str
        Names of the stages whose artifacts ``compute`` receives as keyword arguments.
    config : callable (cfg: dict) -> JSON-able
        The part of the (resolved, plain-dict) config that determines the output.
    compute : callable (cfg: dict, **inputs: Artifact) -> Artifact
    version : int
        Bump when ``compute`` changes meaning, to invalidate old cache entries.
    cached : bool
        False for stages cheaper to recompute than to read back (e.g. a matrix product).
    """

    name: str
    inputs: tuple
    config: Callable[[dict], Any]
    compute: Callable[..., Artifact]
    version: int = 1
    cached: bool = True

    def key(self, cfg: dict, done: dict[str, StageOutput]) -> str:
        return make_key(self.name, self.config(cfg), [done[i].key for i in self.inputs], self.version)


def execute(stage: Stage, cfg: dict, cache: StageCache, done: dict[str, StageOutput]) -> StageOutput:
    """Run ``stage`` (or fetch it from ``cache``) given the finished stages ``done``."""
    key = stage.key(cfg, done)
    inputs = {i: done[i].artifact for i in stage.inputs}
    if not stage.cached:
        return StageOutput(key, stage.compute(cfg, **inputs))
    return StageOutput(key, cache.get_or_compute(stage.name, key, lambda: stage.compute(cfg, **inputs)))
