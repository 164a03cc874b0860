"""Stage ``coordinates``: every row's concept coordinates ``X = Z Cᵀ`` (MMDT paper, Eq. 4) on every
CAV of the concepts stage.

One pass over the latents, chunk by chunk (:class:`ProjectChunk`), asked for when the stage's turn
comes and run by the executor with the next pass over the same latents: the cluster stage's
assignment of every row when the clustering was fitted on a sample, so latents on disk are read
once for both (the CAVs, fitted meanwhile by a worker process, are waited for when that pass
starts); else when the project stage first reads the coordinates. Cached where the latents are an
array read by row range (the plan's stage list says so), so a warm run never reads them; otherwise
a matrix product is cheaper than reading its result back. Empty without concepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.app.stores.artifacts import ConceptsArtifact, CoordinatesArtifact, EncodeArtifact
from pipeline.app.stages.framework import Deferred, Stage
from pipeline.concepts.projection import project


@dataclass(frozen=True)
class ProjectChunk:
    """Concept coordinates of one chunk of latents (picklable: Dask tasks)."""

    cavs: np.ndarray

    def __call__(self, rows: np.ndarray, start: int) -> dict:
        return {"X": project(rows, self.cavs)}


def _compute(cfg: dict, encode: EncodeArtifact, concepts: ConceptsArtifact, plan, ctx) -> CoordinatesArtifact | Deferred:
    if not plan.concepts:
        return CoordinatesArtifact()
    from pipeline.app.execution.chunk_map import resume_folder

    Z = encode.Z
    rows = ctx.work(cfg).later_rows(lambda: ProjectChunk(np.asarray(concepts.cavs, dtype=np.float64)), Z,
                                    int(np.prod(Z.shape[1:])) * 8, resume_folder(ctx, "coordinates"), desc="Z Cᵀ")
    return Deferred(lambda: CoordinatesArtifact(X=rows.result()["X"]))


COORDINATES = Stage("coordinates", ("encode", "concepts"), lambda cfg: {}, _compute, artifact=CoordinatesArtifact,
                    cached=False)
