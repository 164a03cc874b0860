"""Paper figures: tree layouts and formats, concept scatter legend and cuts, counterfactual charts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from pipeline.app.report.concept_plots import leaf_table, plot_concept_scatter
from pipeline.app.report.counterfactual_plots import counterfactual_table, plot_pair_scores, translation_title
from pipeline.app.report.figures import FORMATS, figure_bytes, plot_tree, tree_title
from pipeline.trees.tree import ExplanationTree

SIGNATURES = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}


def axis_tree(n_leaves: int = 3) -> ExplanationTree:
    """A left-deep chain of cuts on alternating concepts: n_leaves leaves, clusters 0..n-1."""
    t = ExplanationTree(2, ["loop", "vertical line"])
    node = 0
    for k in range(n_leaves - 1):
        left, node = t.split(node, k % 2, float(k), left_label=k)
    t.set_label(node, n_leaves - 1)
    return t


def balanced_tree(n_leaves: int) -> ExplanationTree:
    """Leaves split breadth-first until there are n_leaves (depth about log2 n_leaves)."""
    t = ExplanationTree(3, ["loop", "vertical line", "curvature"])
    queue = [0]
    while t.n_leaves < n_leaves:
        node = queue.pop(0)
        queue += list(t.split(node, t.n_leaves % 3, 0.1 * t.n_leaves))
    for k, leaf in enumerate(t.leaves):
        t.set_label(leaf, k)
    return t


def oblique_tree() -> ExplanationTree:
    t = ExplanationTree(6, [f"concept {j}" for j in range(6)])
    left, right = t.split_oblique(0, [0.7, -1.3, 0.2, 0.1, -0.05, 0.4], 0.25, left_label=0)
    t.split(right, 1, 2.0, left_label=1, right_label=2)
    return t


def data(tree, n=200, seed=0):
    X = np.random.default_rng(seed).normal(0, 2, size=(n, tree.n_features))
    ref = tree.predict(X)
    return X, ref, (ref + (np.arange(n) % 7 == 0)) % 3


@pytest.mark.parametrize("make", [axis_tree, oblique_tree])
def test_tree_figure_in_every_format_with_leaf_annotations(make):
    tree = make()
    X, ref, y = data(tree)
    fig = plot_tree(tree, X, ref, y, class_names=["zero", "one", "two"], title=tree_title("mmdt", "mmdt", tree, "d", 0.5))
    for fmt in FORMATS:
        assert figure_bytes(fig, fmt).startswith(SIGNATURES[fmt])
    svg = figure_bytes(fig, "svg").decode()
    assert "pts · " in svg and "% pure" in svg and "mostly" in svg  # SVG keeps text as text
    assert "MMDT on d: 3 leaves" in svg and "mmdt (mmdt)" not in svg
    assert figure_bytes(fig, "svg") == figure_bytes(fig, "svg")  # reproducible bytes
    if tree.is_oblique(0):  # every term of the oblique test, wrapped between terms, never cut
        assert "more" not in svg and all(f"concept {j}" in svg for j in range(6))
        indented = plot_tree(tree, X, layout_name="indented")
        lines = [t.get_text() for t in indented.axes[0].texts if "concept 5" in t.get_text()]
        assert lines and all(len(line) <= 80 for text in lines for line in text.split("\n"))


def test_layout_scales_with_the_number_of_leaves():
    small, big = plot_tree(axis_tree(3)), plot_tree(balanced_tree(15), *data(balanced_tree(15))[:2])
    assert small.get_size_inches()[0] <= 7.0
    w, h = big.get_size_inches()
    assert w <= 4.2 and h > small.get_size_inches()[1]  # indented: grows downwards, fits a column
    texts = [t.get_text() for t in big.axes[0].texts]
    assert sum("→  cluster" in t for t in texts) == 15
    with pytest.raises(ValueError, match="layout_name"):
        plot_tree(small and axis_tree(2), layout_name="sideways")


def test_tree_title_names_the_method():
    t = axis_tree(3)
    assert tree_title("mmdt", "mmdt", t) == "MMDT: 3 leaves, depth 2"
    assert tree_title("fast", "cart", t, "iris", 0.91234) == "fast (CART) on iris: 3 leaves, depth 2, ARI 0.912 vs ground truth"


def test_concept_scatter_has_categorical_legend_and_labelled_cuts():
    t = ExplanationTree(3, ["loop", "line", "hidden"])
    left, right = t.split(0, 0, 0.0, left_label=0)
    a, b = t.split(right, 2, 0.0)  # a cut on a concept that is not shown ...
    t.split(a, 1, 0.5, left_label=1, right_label=2)  # ... above a cut that is: dashed, explained
    t.set_label(b, 3)
    X = np.random.default_rng(0).normal(size=(300, 3))
    fig = plot_concept_scatter(t, X, t.predict(X), features=(0, 1))
    legend = [x.get_text() for x in fig.legends[0].get_texts()]
    assert [s.split(" (")[0] for s in legend[:4]] == ["cluster 0", "cluster 1", "cluster 2", "cluster 3"]
    assert "cut below a cut on\nanother concept" in legend and not fig.axes[0].collections[0].get_array() is not None
    assert len(fig.axes) == 1  # no continuous colour bar
    labels = [x.get_text() for x in fig.axes[0].texts]
    assert "loop <= 0" in labels and "line <= 0.5" in labels  # exact thresholds, outside the plot


def test_counterfactual_table_and_chart_best_pairs_first():
    rows = [{"method": "tgt", "from": 0, "to": 1, "k": 2, "correctness": 0.017, "coverage": 0.5, "explanation": "a"},
            {"method": "tgt", "from": 1, "to": 0, "k": 2, "correctness": 0.9, "coverage": 0.8, "explanation": "b"}]
    from pipeline.app.stores.artifacts import CounterfactualsArtifact

    artifact = CounterfactualsArtifact(rows=rows, deltas=np.zeros((2, 3)), feature_names=["a", "b", "c"],
                                       space="concepts", eps=0.1, l1=0.0)
    table = counterfactual_table(artifact)
    assert list(table["from"]) == [1, 0]
    assert translation_title(rows[0], "concepts") == "TGT: cluster 0 → 1 (concepts) · correctness 0.02 · coverage 0.50"
    fig = plot_pair_scores(table)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["TGT 0 → 1", "TGT 1 → 0"]  # bottom to top: best on top
    assert "mean correctness 0.46, coverage 0.65" in ax.get_title()


def test_leaf_table_with_classes():
    t = axis_tree(3)
    X, ref, y = data(t)
    df = leaf_table(t, X, ref, y, ["zero", "one", "two"])
    assert list(df["size"]) == [int(np.sum(t.apply(X) == leaf)) for leaf in t.leaves]
    assert df["purity"].eq(1.0).all() and set(df["class"]) <= {"zero", "one", "two"}
    assert df.loc[0, "rule"] == "loop <= 0"
    assert isinstance(pd.DataFrame(df), pd.DataFrame) and isinstance(plot_tree(t), Figure)


def test_oblique_tests_wrap_between_terms_never_inside_names():
    from pipeline.app.report.figures import wrap_terms

    text = "1·pixel 21 - 0.5·pixel 42 + 0.25·pixel 10 + 2 more <= 4"
    lines = wrap_terms(text, 25).split("\n")
    assert lines == ["1·pixel 21 - 0.5·pixel 42", "+ 0.25·pixel 10", "+ 2 more <= 4"]


def test_figures_encoded_in_worker_processes_are_the_bytes_encoded_here():
    """A report's figures encoded by spawned worker processes (threads > 1) are byte for byte
    those this process encodes; one encoder serves several figures and formats."""
    from pipeline.app.execution.encoding import Encoder, encode

    figs = [plot_tree(axis_tree(3), title="three"), plot_tree(balanced_tree(6), title="six", width=3.3)]
    with Encoder(2) as encoder:
        pending = [encoder.submit(f, FORMATS, f"v{i}.") for i, f in enumerate(figs)]
        got = [p.result() for p in pending]
    assert got == [encode(f, FORMATS, f"v{i}.") for i, f in enumerate(figs)]
    assert list(got[0]) == ["v0.png", "v0.svg", "v0.pdf"]


def test_a_dead_figure_worker_costs_only_time():
    """A worker process killed (out of memory, say) leaves its figures to this process: the
    same bytes, no error; later figures are encoded here too."""
    import os
    import signal

    from pipeline.app.execution.encoding import Encoder, encode

    fig = plot_tree(axis_tree(3))
    with Encoder(2) as encoder:
        first = encoder.submit(fig, ("svg",))
        assert first.result() == encode(fig, ("svg",))
        workers = list(encoder._pool._processes.values())
        for process in workers:
            os.kill(process.pid, signal.SIGKILL)
        for process in workers:  # dead before the next figures are handed over
            process.join()
        late = [encoder.submit(fig, ("png", "svg")) for _ in range(2)]
        assert all(p.result() == encode(fig, ("png", "svg")) for p in late)
    with Encoder(1) as here:  # one thread: no process is started
        assert here.submit(fig, ("svg",)).result() == encode(fig, ("svg",)) and here._pool is None


def test_a_program_run_as_a_script_encodes_its_figures_itself(monkeypatch):
    """``python script.py``: a spawned worker would import the script again (and redo its work
    without a __main__ guard), so its figures are encoded in this process; ``python -m`` and
    notebooks (no main file) start workers."""
    import sys
    import types

    from pipeline.app.execution.encoding import Encoder, encode
    from pipeline.app.execution.workers import main_is_importable

    script = types.ModuleType("__main__")
    script.__file__ = "/home/me/run_everything.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not main_is_importable()
    fig = plot_tree(axis_tree(2))
    with Encoder(2) as encoder:
        assert encoder.submit(fig, ("svg",)).result() == encode(fig, ("svg",)) and encoder._pool is None
    notebook = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    assert main_is_importable()


def test_dask_workers_encode_the_same_bytes_and_a_closed_cluster_costs_only_time():
    """compute=dask: the run's Dask workers encode the report's figures (the same bytes); a cluster
    that is gone leaves them to this process."""
    distributed = pytest.importorskip("distributed")
    from pipeline.app.execution.encoding import Encoder, encode

    fig = plot_tree(balanced_tree(5), title="five")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        with Encoder(client=client) as encoder:
            assert encoder.submit(fig, FORMATS, "x.").result() == encode(fig, FORMATS, "x.")
    with Encoder(client=client) as encoder:  # closed: encoded here
        assert encoder.submit(fig, ("svg",)).result() == encode(fig, ("svg",))


def test_a_pdf_font_subset_made_once_is_embedded_with_the_same_bytes():
    """subset_once remembers matplotlib's TrueType subsets by font and glyphs: a PDF that needs
    one made before embeds those bytes, and the files are byte for byte those of matplotlib's own
    subsetting (a tree's three layouts share one subset; the memo saves half their time)."""
    from matplotlib.backends import _backend_pdf_ps as pdfps

    from pipeline.app.execution import encoding

    fig = plot_tree(balanced_tree(6), title="six")
    encoding.subset_once()
    memo, as_file = pdfps.get_glyphs_subset, pdfps.font_as_file
    assert memo.remembers
    encoding._SUBSETS.clear()
    remembered = [figure_bytes(fig, "pdf") for _ in range(2)]  # made, then taken from the memo
    assert encoding._SUBSETS
    subsets = dict(encoding._SUBSETS)
    try:  # matplotlib's own pair, as before subset_once
        pdfps.get_glyphs_subset, pdfps.font_as_file = memo.original, as_file.original
        plain = figure_bytes(fig, "pdf")
    finally:
        pdfps.get_glyphs_subset, pdfps.font_as_file = memo, as_file
    assert remembered == [plain, plain] and plain.startswith(b"%PDF")
    assert len(subsets) == len(encoding._SUBSETS)  # the second file made no new subset


def test_a_trees_layouts_go_to_one_worker_as_one_task():
    """submit_all hands several figures to one worker and returns their files in one dict, in
    the order submitted, the bytes encoded here."""
    from pipeline.app.execution.encoding import Encoder, encode_all

    jobs = [(plot_tree(axis_tree(3), title="three"), ("svg", "pdf"), ""),
            (plot_tree(axis_tree(3), title="three", width=3.3), ("pdf", "png"), "column.")]
    with Encoder(2) as encoder:
        got = encoder.submit_all(jobs).result()
    assert list(got) == ["svg", "pdf", "column.pdf", "column.png"]
    assert got == encode_all(jobs)
