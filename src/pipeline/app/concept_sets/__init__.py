"""Concept sources of the application layer: concept-set files and the data they name.

:func:`concept_set` is the ``_target_`` of the shipped ``conf/concepts/*.yaml`` options: it
reads ``concepts/<name>.yaml`` (or ``concepts.file``) and returns the
:class:`~pipeline.concepts.sets.ConceptExamples` the concepts stage fits CAVs on. Any callable
returning ``ConceptExamples`` plugs in the same way (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from pipeline.app.concept_sets.definitions import CONCEPTS_DIR, build_examples, load_concept_spec
from pipeline.app.concept_sets.manifest import resolve_root
from pipeline.concepts.sets import ConceptExamples

__all__ = ["CONCEPTS_DIR", "ConceptExamples", "build_examples", "concept_set", "load_concept_spec", "resolve_root"]


def concept_set(dataset, name: str, file: str | None = None, data_dir: str | None = None, cfg: dict | None = None,
                **options) -> ConceptExamples:
    """The examples of concept set ``name`` (``concepts/<name>.yaml``, or the YAML file ``file``)
    for ``dataset`` (``cfg``: the run's config, for sets that read more of the dataset); ``options`` (``concepts.params``) override keys of the file (``source``,
    ``subset``, ``root``, ``download``, ``min_positives`` ...)."""
    spec = load_concept_spec(file or name)
    options.setdefault("data_dir", data_dir)
    return build_examples(spec, dataset, cfg=cfg, **options)
