"""Pipeline stages: load -> encode -> cluster -> concepts -> project -> fit -> evaluate.

Each module defines one stage (a :class:`pipeline.app.stages.base.Stage` or, for ``encode``, an
``execute_encode`` function); :mod:`pipeline.app.runner` runs them in order. See docs/pipeline.md.
"""
