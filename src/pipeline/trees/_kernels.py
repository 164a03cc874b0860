"""The compiled (numba) kernels of the sweep-line tree algorithms, in one import.

Each kernel does, per feature row of a node's sorted orders, the single pass that the numpy
versions in :mod:`pipeline.trees._spex_sweeps` spread over ~20 array passes. They live by what
they do: clique-graph sweeps (:mod:`pipeline.trees._clique_kernels`), sweeps on any graph
(:mod:`pipeline.trees._graph_kernels`), a node's orders split and keyed
(:mod:`pipeline.trees._row_kernels`), a fitted tree applied to rows
(:mod:`pipeline.trees._apply_kernels`), and the choice between a ``prange`` kernel and its serial
twin (:mod:`pipeline.trees._kernel_dispatch`). Importing this module loads them all (the trees'
``apply`` takes its compiled pass once it is loaded). numba is already a dependency of
pynndescent; if it cannot be imported, ``AVAILABLE`` is False and callers use the numpy paths.
"""

from __future__ import annotations

from pipeline.trees._kernel_dispatch import (  # noqa: F401 (re-exported)
    _SLACK,
    AVAILABLE,
    PARALLEL_MIN_WORK,
    SizeDispatch,
    parallel_min_work,
    serial_below,
)

if AVAILABLE:
    from pipeline.trees._apply_kernels import apply_axis_tree, cut_neighbours, row_blocks  # noqa: F401
    from pipeline.trees._clique_kernels import clique_split_sweep, clique_sweep  # noqa: F401
    from pipeline.trees._graph_kernels import asymmetry, graph_split_edges, graph_sweep, upper_edges  # noqa: F401
    from pipeline.trees._row_kernels import (  # noqa: F401
        compress_rows,
        group_rows,
        pack_keys,
        partition_rows,
        unpack_keys,
    )
