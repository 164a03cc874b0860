"""Concepts measured on each input by well-kept libraries, instead of defined by its class.

A :class:`Measure` is one measured property (a loop in a digit, a bag's handle, the share of
money words in an e-mail) and names one concept; :class:`Measurements` holds the values of a
few measures on ``n`` items, NaN where a measure is undefined for an item (a blank image, an
empty text), with a note per measure saying which items and why. The measuring functions are
pure (arrays and already-loaded lexicons in, arrays out):

- :func:`digit_measurements` (:mod:`.digits`): handwritten digits (MNIST 28x28, sklearn 8x8) —
  loops, vertical / horizontal lines, curvature, slant, thickness, size, ink, stroke ends and
  junctions, from the pixels with scikit-image and scipy.ndimage;
- :func:`silhouette_measurements` (:mod:`.silhouettes`): Fashion-MNIST-like objects — holes,
  leg gap, sleeves, aspect, symmetry, brightness, texture, fill;
- :func:`text_measurements` (:mod:`.texts`): lexicon category rates (e.g. empath's categories),
  sentiment (e.g. VADER), readability (e.g. Flesch), length, URLs, numbers, exclamations,
  upper case. The lexicon and the scoring functions are passed in; the application builds them
  (:mod:`pipeline.app.concept_sets.measured_text`).

Each :class:`Measure` says how CAV labels come from it (``split``): ``"presence"`` (value > 0
against value == 0, for counts that are zero on many items, such as loops) or ``"tertiles"``
(the top third against the bottom third, the middle third left out, for continuous values).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

from pipeline.validation import InvalidInputError

SPLITS = ("presence", "tertiles")
INPUTS = ("image", "text", "tabular")  # tabular: a user's measurement of table rows


@dataclass(frozen=True)
class Measure:
    """One measured property of an input, which names one concept.

    Attributes
    ----------
    name : str
        Concept name as rules print it (``"loop"``, ``"vertical_line"``, ``"money_words"``).
    description : str
        One line a reader understands: what is measured and how.
    unit : str
        Unit of the values (``"holes"``, ``"px"``, ``"degrees"``, ``"words per 100"``).
    split : {"presence", "tertiles"}
        How CAV labels come from the values: ``"presence"`` is value > 0 against value == 0;
        ``"tertiles"`` is the top third against the bottom third (the middle third unused).
    input : {"image", "text"}
        The kind of input the measure reads.
    """

    name: str
    description: str
    unit: str
    split: str
    input: str

    def __post_init__(self):
        if self.split not in SPLITS:
            raise InvalidInputError(f"Measure {self.name!r}: split={self.split!r}; choose one of {SPLITS}.")
        if self.input not in INPUTS:
            raise InvalidInputError(f"Measure {self.name!r}: input={self.input!r}; choose one of {INPUTS}.")


@dataclass(frozen=True)
class Measurements:
    """Values of ``k`` measures on ``n`` items.

    Attributes
    ----------
    values : ndarray of shape (n_items, k), float64
        One column per measure, NaN where the measure is undefined for the item.
    measures : tuple of Measure, length k
        The measure of each column, in column order.
    notes : dict of str -> str
        Measure name -> one paragraph saying on which items (the first few indices and the count)
        the measure could not be computed and why; absent for measures defined on every item.
    """

    values: np.ndarray
    measures: tuple
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        values = np.asarray(self.values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(self.measures):
            raise InvalidInputError(f"Measurements: values of shape {values.shape} do not match "
                                    f"{len(self.measures)} measure(s); expected (n_items, {len(self.measures)}).")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "measures", tuple(self.measures))

    @property
    def names(self) -> list[str]:
        """The measures' names in column order."""
        return [m.name for m in self.measures]

    def column(self, name: str) -> np.ndarray:
        """The values of measure ``name``, shape (n_items,)."""
        names = self.names
        if name not in names:
            raise InvalidInputError(f"no measure named {name!r}; these measurements have {names}.")
        return self.values[:, names.index(name)]

    def frame(self):
        """The values as a pandas DataFrame, one column per measure (named by the measure)."""
        import pandas as pd

        return pd.DataFrame(self.values, columns=self.names)


_LAZY = {"digit_measurements": "digits", "silhouette_measurements": "silhouettes", "text_measurements": "texts",
         "DIGIT_MEASURES": "digits", "SILHOUETTE_MEASURES": "silhouettes", "TEXT_CATEGORIES": "texts"}

__all__ = sorted(["Measure", "Measurements", *_LAZY])


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"pipeline.concepts.measures.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'pipeline.concepts.measures' has no attribute {name!r}")


def __dir__():
    return __all__
