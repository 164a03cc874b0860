"""Concepts measured on each input (issue 47): the types every measurement returns.

(Interim: the measurement functions themselves land with the measures library.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Measure:
    """One measured property: one concept."""

    name: str
    description: str
    unit: str
    split: str  # "presence" (value > 0 vs == 0) | "tertiles" (top vs bottom third)
    input: str  # "image" | "text" | "table"


@dataclass(frozen=True)
class Measurements:
    """Values (n_items, k) of ``k`` measures; NaN where a measure is undefined for an item."""

    values: np.ndarray
    measures: tuple
    notes: dict = field(default_factory=dict)

    def column(self, name: str) -> np.ndarray:
        return self.values[:, [m.name for m in self.measures].index(name)]
