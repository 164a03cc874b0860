"""``concepts=mnist_measured`` / ``fashion_measured`` / ``text_measured`` / ``measured``: concepts measured
on each input (issue 47).

The concept source of ``conf/concepts/*measured.yaml``. ``measures`` maps a name to a config node
``{_target_: <callable>, params: {...}}`` (and optionally ``split``, ``description``, ``unit``); each
callable takes the run's raw inputs — images ``(n, h, w, c)``, a list of texts, or a table's rows
as a DataFrame — and returns either a :class:`pipeline.concepts.measures.Measurements` (several
measured properties with their descriptions) or an array of shape ``(n,)`` (one property, the
concept named by its key). The built-in sets name the library's measurements
(:mod:`pipeline.concepts.measures`); a user's own measurement plugs in the same way::

    python -m pipeline concepts=measured '+concepts.params.measures.ink._target_=my_pkg.ink'

Every row is measured; a random ``fit_share`` of the rows fit the CAVs and the others check
them (:mod:`pipeline.concepts.measured_maths`). A measurement that fails — it raises, returns the wrong
shape, is NaN or constant on every item, does not apply to the data's kind — costs its own
concept(s) only: one paragraph each says which and why, and the run goes on with the others.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.concepts.measured_maths import fit_rows, items_text, make_split
from pipeline.concepts.measures import Measure, Measurements
from pipeline.concepts.sets import ConceptExamples, provenance
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

#: the keys a measure's config node may have besides ``_target_`` and ``params``
NODE_KEYS = ("split", "description", "unit")
UNITS = {"image": "images", "text": "texts", "tabular": "rows"}


def measured(dataset, cfg: dict, measures: dict | None = None, concepts: list | None = None, fit_share: float = 0.5,
             min_items: int = 20, name: str = "measured") -> ConceptExamples:
    """Measure every input of ``dataset`` with ``measures`` and label the CAVs' rows by the measurements.

    Parameters
    ----------
    dataset : pipeline.app.data.Dataset
    cfg : dict
        The run's config (its ``seed`` draws the rows the CAVs are fitted on).
    measures : dict of str to dict
        Name -> ``{_target_, params, split, description, unit}`` (see the module text).
    concepts : list of str, optional
        The measured properties kept as concepts, in this order (None: all).
    fit_share : float, default=0.5
        Share of the rows the CAVs are fitted on; the others check them.
    min_items : int, default=20
        A concept needs at least this many items on each side of its split.
    """
    if not measures or not isinstance(measures, dict):
        raise InvalidInputError("concepts.params.measures is empty: give it one entry per measurement, "
                                "{name: {_target_: <module.function>}}, e.g. the shipped concepts=mnist_measured.")
    kind = dataset.kind
    unit = "images" if dataset.images is not None else UNITS.get(kind, "items")
    inputs = _inputs(dataset)
    columns, specs, notes = [], [], []
    for key, node in measures.items():
        got = run_measure(str(key), node, inputs, kind, len(dataset), unit)
        if isinstance(got, str):
            notes.append(got)
            continue
        notes += [f"concept {n!r}: {why}" for n, why in got.notes.items()]
        for j, m in enumerate(got.measures):
            columns.append(np.asarray(got.values[:, j], dtype=np.float64))
            specs.append(m)
    if concepts is not None:
        wanted = [str(c) for c in concepts]
        have = [m.name for m in specs]
        unknown = [c for c in wanted if c not in have]
        if unknown:
            raise InvalidInputError(f"concepts.params.concepts names {unknown}, which no measurement gives; the "
                                    f"measurements give {have}.")
        order = [have.index(c) for c in wanted]
        columns, specs = [columns[i] for i in order], [specs[i] for i in order]
    dup = sorted({m.name for m in specs if [s.name for s in specs].count(m.name) > 1})
    if dup:
        raise InvalidInputError(f"measured concepts {dup} are given by more than one measurement; rename one (its key "
                                "in concepts.params.measures, or the concepts it returns).")
    mask = fit_rows(len(dataset), float(fit_share), cfg["seed"])
    labels, kept, splits = [], [], []
    for values, m in zip(columns, specs):
        bad = np.flatnonzero(~np.isfinite(values))
        try:
            split = make_split(values, m.split)
            lab = split.labels(values)
            for side, what in ((1.0, "positive"), (0.0, "negative")):
                count = int((lab[mask] == side).sum())
                if count < min_items:
                    raise InvalidInputError(f"only {count} of the {int(mask.sum())} {unit} the CAV is fitted on are "
                                            f"{what} ({split.sides(m.unit)[int(side == 0.0)]}); it needs at least "
                                            f"{min_items}")
        except InvalidInputError as exc:
            notes.append(f"concept {m.name!r} left out: {exc}.")
            continue
        if bad.size:
            notes.append(f"concept {m.name!r}: the measurement is undefined (NaN) on {items_text(bad, unit)}; those "
                         f"{unit} take no part in its CAV or its checks.")
        lab[~mask] = np.nan  # the other rows check the CAV
        labels.append(lab)
        kept.append((values, m, split))
    for n in notes:
        log.warning("measured concepts: %s", n)
    if not kept:
        raise InvalidInputError("no measured concept could be used:\n" + "\n".join(f"- {n}" for n in notes))
    names = [m.name for _, m, _ in kept]
    n_fit = int(mask.sum())
    prov = {}
    for values, m, split in kept:
        pos, neg = split.sides(m.unit)
        prov[m.name] = provenance(f"{m.name} {pos}", f"{m.name} {neg}", None,
                                  f"measured on the {unit}: {m.description}; CAV fitted on {n_fit} of the "
                                  f"{len(dataset)} {unit}, checked on the others")
    record = [{"name": m.name, "description": m.description, "unit": m.unit, "split": split.kind, "cut": split.cut,
               "lo": split.lo, "hi": split.hi, "strict": split.strict, "positive": split.sides(m.unit)[0],
               "negative": split.sides(m.unit)[1]} for _, m, split in kept]
    return ConceptExamples(name, names, np.column_stack(labels), meta={
        "source": "measured", "provenance": prov, "notes": notes,
        "measured": {"values": np.column_stack([v for v, _, _ in kept]), "measures": record, "fit_rows": mask}})


def _inputs(dataset):
    """What a measurement reads: grey-or-colour images (n, h, w, c), texts, or a table's rows."""
    if dataset.kind == "image" or dataset.images is not None:
        return np.asarray(dataset.images if dataset.images is not None else dataset.X)
    if dataset.kind == "text":
        return list(dataset.X)
    import pandas as pd

    X = np.asarray(dataset.X)
    return pd.DataFrame(X, columns=dataset.feature_names if dataset.feature_names is not None
                        and len(dataset.feature_names) == X.shape[1] else None)


def run_measure(key: str, node, inputs, kind: str, n: int, unit: str, where: str | None = None) -> Measurements | str:
    """The measurements of one config node (``where``: its config key), or the paragraph saying why
    it gave none."""
    from pipeline.app.configuration.instantiate import call, factory

    where = where or f"concepts.params.measures.{key}"
    if not isinstance(node, dict) or not node.get("_target_"):
        raise InvalidInputError(f"{where} must be a config node {{_target_: <module.function>, params: {{...}}}}; got "
                                f"{node!r}.")
    extra = sorted(set(node) - {"_target_", "params", *NODE_KEYS})
    if extra:
        raise InvalidInputError(f"{where} has key(s) {extra}; a measurement node takes _target_, params and "
                                f"optionally {list(NODE_KEYS)}.")
    fn = factory({"_target_": node["_target_"], "params": node.get("params") or {}}, where)
    target = node["_target_"]
    try:
        got = call(fn, where, inputs)
    except InvalidInputError as exc:
        return f"measurement {key!r} ({target}) gave no concept: {exc}"
    except Exception as exc:  # a user's callable: its failure is reported, the run goes on
        return (f"measurement {key!r} ({target}) gave no concept: it raised {type(exc).__name__}: {exc}. Fix the "
                f"function or remove {where}.")
    if isinstance(got, Measurements):
        if got.values.shape != (n, len(got.measures)):
            return (f"measurement {key!r} ({target}) gave no concept: its values have shape {got.values.shape}, but "
                    f"the data has {n} {unit} and it names {len(got.measures)} measures.")
        if node.get("split") or node.get("description") or node.get("unit"):
            return (f"measurement {key!r} ({target}) returns several measures, each with its own split, description "
                    f"and unit; {where}.split/description/unit apply only to a measurement of one value per item.")
        return got
    values = np.asarray(got, dtype=object) if not isinstance(got, np.ndarray) else got
    try:
        values = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return (f"measurement {key!r} ({target}) gave no concept: it returned {type(got).__name__} values that are not "
                "numbers; a measurement returns one number per item (or a Measurements).")
    if values.shape != (n,):
        return (f"measurement {key!r} ({target}) gave no concept: it returned shape {values.shape}; a measurement "
                f"returns one number per item, shape ({n},) for the {n} {unit} of this data.")
    spec = Measure(name=key, description=str(node.get("description") or f"{target} (your measurement)"),
                   unit=str(node.get("unit") or ""), split=str(node.get("split") or "tertiles"), input=kind)
    return Measurements(values.reshape(-1, 1), (spec,), {})
