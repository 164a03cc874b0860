"""Pipeline stages: load -> encode -> cluster -> concepts -> project -> fit -> evaluate.

Each module defines one stage (a :class:`pipeline.stages.base.Stage` or, for ``encode``, an
``execute_encode`` function); :mod:`pipeline.runner` runs them in order. See docs/pipeline.md.
"""
