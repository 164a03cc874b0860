"""A finished run applied to new data (issue 37): the saved explainer, ConceptExplainer and
``python -m pipeline.explain`` (docs/explain.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.app.stores.cache import StageCache
from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run, run_stages, to_plain
from pipeline.trees.leaf_moves import nearest_other_leaf, path_margins
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def finished_run(tmp: Path, *overrides: str):
    """A run into ``tmp/run`` (cache ``tmp/cache``); returns (run dir, config, stage outputs, fits)."""
    args = [*overrides, f"paths.output_dir={tmp / 'run'}", f"paths.cache_dir={tmp / 'cache'}",
            "report.figures=false", "report.html=false", "report.summary=false"]
    cfg = compose_config(args)
    run(cfg)
    plain = to_plain(compose_config(args))
    done, fits, _ = run_stages(plain, StageCache(Path(plain["paths"]["cache_dir"])))
    return tmp / "run", plain, done, fits


@pytest.fixture(scope="module")
def iris_run(tmp_path_factory):
    return finished_run(tmp_path_factory.mktemp("iris"), "dataset=iris")


@pytest.fixture(scope="module")
def concept_run(tmp_path_factory):
    """Concepts on raw pixels (fast: identity encoder), percentile units."""
    return finished_run(tmp_path_factory.mktemp("digits"), "dataset=digits", "encoder=identity", "clustering=gmm",
                        "concepts=discovered", "concepts.params.n_concepts=5", "explainer=[concept_mmdt,concept_cart]")


def test_every_finished_run_saves_its_explainer(iris_run):
    run_dir = iris_run[0]
    folder = run_dir / "explainer"
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert names == ["SHA256SUMS", "arrays.npz", "explainer.json", "trees/cart.json", "trees/mmdt.json"]
    doc = json.loads((folder / "explainer.json").read_text())
    assert doc["packages"]["numpy"] == np.__version__ and doc["reference"]["assign"] == "mixture"
    assert not list(run_dir.glob(".explainer*"))  # the temporary folder was renamed into place
    with np.load(folder / "arrays.npz", allow_pickle=False) as data:  # no pickle anywhere
        assert {"feature_min", "feature_max", "feature_scale", "ref_means"} <= set(data.files)


@pytest.mark.parametrize("which", ["iris_run", "concept_run"])
def test_round_trip_equals_the_runs_own_assignments(which, request):
    from pipeline import ConceptExplainer

    run_dir, cfg, done, fits = request.getfixturevalue(which)
    ex = ConceptExplainer.load(run_dir)
    load = done["load"].artifact
    df = ex.explain(load.inputs)
    np.testing.assert_array_equal(df["reference"].to_numpy(), done["cluster"].artifact.labels)
    for row, fit in fits.items():
        np.testing.assert_array_equal(df[f"{row}.cluster"].to_numpy(), fit.predictions)
        np.testing.assert_array_equal(ex.predict(load.inputs, tree=row), fit.predictions)
        assert df[f"{row}.rule_holds"].all()  # every training point satisfies its printed rule
    np.testing.assert_allclose(ex.transform(load.inputs), done["project"].artifact.X)
    assert not df["out_of_range"].any()  # the training data are inside their own range
    if which == "iris_run":  # identity encoder: the float64 rows as latents give the same answers
        pd.testing.assert_frame_equal(ex.explain(np.asarray(load.X, dtype=np.float64), latents=True), df)
    if which == "concept_run":
        assert {f"{name} (percentile)" for name in ex.feature_names_} <= set(df.columns)  # the run's units
        rules = (run_dir / "trees" / "concept_mmdt.rules.txt").read_text()
        assert all(r.split(" → ")[0] in rules for r in df["concept_mmdt.rule"].unique())  # as the run printed them


def test_a_copied_bundle_loads_in_a_fresh_process_without_the_cache(iris_run, tmp_path):
    run_dir = iris_run[0]
    copy = tmp_path / "elsewhere" / "my_explainer"
    shutil.copytree(run_dir / "explainer", copy)
    code = ("import numpy as np; from sklearn.datasets import load_iris; from pipeline import ConceptExplainer; "
            f"ex = ConceptExplainer.load({str(copy)!r}); print(ex.predict(load_iris().data, tree='cart').tolist())")
    out = subprocess.run([sys.executable, "-c", code], env=ENV, cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == iris_run[3]["cart"].predictions.tolist()


def test_save_writes_a_new_bundle_and_never_overwrites(iris_run, tmp_path):
    from pipeline import ConceptExplainer

    ex = ConceptExplainer.load(iris_run[0])
    path = ex.save(tmp_path / "saved")
    again = ConceptExplainer.load(path)
    X = np.random.default_rng(0).normal(5, 2, size=(30, 4))
    pd.testing.assert_frame_equal(ex.explain(X), again.explain(X))
    with pytest.raises(InvalidInputError, match="never overwritten"):
        ex.save(path)
    with pytest.raises(InvalidInputError, match="no checkpoint file to copy"):
        ex.save(tmp_path / "with_weights", copy_weights=True)


@pytest.mark.parametrize("target", ["trees/cart.json", "arrays.npz", "explainer.json"])
def test_a_tampered_bundle_is_refused(iris_run, tmp_path, target):
    from pipeline import ConceptExplainer

    copy = tmp_path / "b"
    shutil.copytree(iris_run[0] / "explainer", copy)
    p = copy / target
    p.write_bytes(p.read_bytes().replace(b"1", b"2", 1))
    with pytest.raises(InvalidInputError, match=f"modified or damaged after it was saved: {re.escape(target)}"):
        ConceptExplainer.load(copy)
    (copy / target).unlink()
    with pytest.raises(InvalidInputError, match="copied incompletely"):
        ConceptExplainer.load(copy)


def test_bad_input_is_one_paragraph(iris_run, tmp_path):
    from pipeline import ConceptExplainer

    with pytest.raises(InvalidInputError, match="neither a finished run directory"):
        ConceptExplainer.load(tmp_path)
    (tmp_path / "status.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
    with pytest.raises(InvalidInputError, match="not a finished run: its status.json says 'failed'"):
        ConceptExplainer.load(tmp_path)
    (tmp_path / "status.json").unlink()
    (tmp_path / "results.csv").write_text("x\n")
    with pytest.raises(InvalidInputError, match="without a saved explainer"):
        ConceptExplainer.load(tmp_path)
    ex = ConceptExplainer.load(iris_run[0])
    with pytest.raises(InvalidInputError, match=r"shape \(3, 5\).*\(n, 4\)"):
        ex.explain(np.zeros((3, 5)))
    with pytest.raises(InvalidInputError, match="takes rows of a table, but got list of str"):
        ex.explain(["an e-mail", "another"])
    with pytest.raises(InvalidInputError, match="no tree 'imm'"):
        ex.predict(np.zeros((2, 4)), tree="imm")
    df = pd.DataFrame(np.ones((2, 4)), columns=ex.bundle_.doc["input"]["feature_names"])
    assert len(ex.explain(df[df.columns[::-1]])) == 2  # columns found by name
    far = ex.explain(np.full((1, 4), 100.0))
    assert far["out_of_range"].iloc[0] and "petal width (cm)" in far["out_of_range_features"].iloc[0]


def test_a_missing_encoder_checkpoint_is_one_paragraph(iris_run):
    from pipeline import ConceptExplainer

    ex = ConceptExplainer.load(iris_run[0])
    ex.bundle_.doc["encoder"].update(checkpoint="/nowhere/vade/abc.pt", checkpoint_sha256="0" * 64,
                                     checkpoint_portable="${paths.models_dir}/vade/abc.pt")
    with pytest.raises(InvalidInputError, match="checkpoint this explainer needs is missing.*models_dir"):
        ex.explain(np.zeros((1, 4)))
    assert len(ex.explain(np.zeros((1, 4)), latents=True)) == 1  # latents need no encoder


def test_a_replaced_checkpoint_and_other_package_versions_are_named(iris_run, tmp_path):
    from pipeline import ConceptExplainer
    from pipeline.app.stores.cache import file_digest
    from pipeline.app.explainer.explainer_bundle import version_differences

    ckpt = tmp_path / "vade" / "abc.pt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"retrained weights")
    st = ckpt.stat()
    ckpt.with_suffix(".json").write_text(json.dumps({"sha256": file_digest(ckpt), "size": st.st_size,
                                                     "mtime_ns": st.st_mtime_ns}))
    ex = ConceptExplainer.load(iris_run[0])
    ex.bundle_.doc["encoder"].update(checkpoint=str(ckpt), checkpoint_sha256="0" * 64)
    with pytest.raises(InvalidInputError, match="not the one this explainer was saved with"):
        ex.explain(np.zeros((1, 4)))
    assert version_differences({"numpy": "0.0.1", "scikit-learn": "0.1"}) == [
        f"numpy 0.0.1 when saved, {np.__version__} here",
        f"scikit-learn 0.1 when saved, {__import__('sklearn').__version__} here"]


def test_a_new_sample_between_a_printed_decimal_and_the_cut_is_flagged(iris_run):
    from pipeline import ConceptExplainer

    ex = ConceptExplainer.load(iris_run[0])
    tree = ex.trees_["mmdt"]
    root = int(tree.feature[0]), float(tree.threshold[0])
    printed = ex.bundle_.doc["trees"]["mmdt"]["printed_tests"]["0"]["threshold"]
    assert printed != root[1]  # the shortest decimal between training neighbours, not the cut itself
    x = np.full((1, 4), 1.0)
    x[0, root[0]] = (printed + root[1]) / 2  # between them: the tree and the printed text disagree
    df = ex.explain(x)
    assert not df["mmdt.rule_holds"].iloc[0]
    assert df["mmdt.cluster"].iloc[0] == tree.predict(x)[0]  # routed by the exact cut


def test_a_run_without_concepts_has_no_concept_columns(iris_run):
    from pipeline import ConceptExplainer

    df = ConceptExplainer.load(iris_run[0]).explain(np.ones((2, 4)))
    assert not [c for c in df.columns if "(cm)" in c or c.startswith("P(")]
    assert {"mmdt.rule", "mmdt.margin", "mmdt.change", "cart.to_cluster"} <= set(df.columns)


def test_the_command(iris_run, tmp_path):
    out = tmp_path / "ex"
    proc = subprocess.run([sys.executable, "-m", "pipeline.explain", str(iris_run[0]), "dataset=iris",
                           f"paths.cache_dir={tmp_path / 'cache'}", f"output={out}", "show=3"],
                          env=ENV, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "mmdt: rules that fired" in proc.stdout and "agreement (new)" in proc.stdout
    df = pd.read_parquet(out / "explanations.parquet")
    assert len(df) == 150 and {"row", "reference", "cart.rule", "cart.leaf"} <= set(df.columns)
    table = pd.read_csv(out / "generalisation.csv").set_index("explainer")
    # the run's own data: the new figures are the training ones
    np.testing.assert_allclose(table.loc[["mmdt", "cart"], "agreement (new)"],
                               table.loc[["mmdt", "cart"], "agreement (training)"])
    np.testing.assert_allclose(table["ARI vs labels (new)"], table["ARI vs labels (training)"])
    page = (out / "report.html").read_text()
    assert "samples</h3>" in page and "petal width (cm) &lt;= 0.8 → cluster 1 — 50 samples" in page
    bad = subprocess.run([sys.executable, "-m", "pipeline.explain", str(tmp_path), "dataset=iris"], env=ENV,
                         cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
    none = subprocess.run([sys.executable, "-m", "pipeline.explain", str(iris_run[0])], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True)
    assert none.returncode == 1 and "dataset option" in none.stderr


# ------------------------------------------------------------------ rules and moves (hypothesis)
_CONDITION = re.compile(r"^(?:(?P<lo>\S+) < (?P<a>\S+) <= (?P<hi>\S+)|(?P<b>\S+) (?P<op><=|>) (?P<t>\S+))$")


def rule_holds(text: str, x: np.ndarray, names: list[str]) -> bool:
    """Evaluate a printed raw-unit axis-aligned rule on the point ``x`` (the test's own reader)."""
    body = text.split(" → ")[0]
    if body == "always":
        return True
    for cond in body.split(" and "):
        m = _CONDITION.match(cond)
        assert m, cond
        if m["a"]:
            v = x[names.index(m["a"])]
            if not float(m["lo"]) < v <= float(m["hi"]):
                return False
        else:
            v = x[names.index(m["b"])]
            if (v <= float(m["t"])) != (m["op"] == "<="):
                return False
    return True


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_leaves=st.integers(3, 7))
def test_the_printed_rule_routes_every_point_as_the_tree_does(seed, n_leaves):
    from pipeline.app.explainer.explainer_bundle import rule_texts
    from pipeline.trees.cart import CART

    rng = np.random.default_rng(seed)
    k = int(rng.integers(-3, 4))  # values of any size, rounded to few decimals (ties between points)
    X = np.round(rng.normal(size=(80, 3)) * 10.0 ** k, int(rng.integers(max(0, -k) + 1, 6)))
    y = rng.integers(0, 3, size=80)
    tree = CART(n_leaves, random_state=0).fit(X, y).tree_
    tree.feature_names = ["a", "b", "c"]
    texts = rule_texts(tree, X)
    leaves = tree.apply(X)
    for i in range(len(X)):
        fired = [leaf for leaf, t in texts.items() if rule_holds(t["text"], X[i], tree.feature_names)]
        assert fired == [str(leaves[i])]


def random_tree(rng, oblique: bool) -> ExplanationTree:
    tree = ExplanationTree(3)
    frontier, label = [0], 0
    for _ in range(int(rng.integers(1, 6))):
        node = frontier.pop(int(rng.integers(len(frontier))))
        if oblique and rng.random() < 0.5:
            left, right = tree.split_oblique(node, rng.normal(size=3), float(rng.normal()))
        else:
            left, right = tree.split(node, int(rng.integers(3)), float(rng.normal()))
        frontier += [left, right]
    for leaf in frontier:
        tree.set_label(leaf, label % 3)
        label += 1
    return tree


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), oblique=st.booleans())
def test_the_counterfactual_moves_the_sample_to_the_stated_leaf(seed, oblique):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, oblique)
    X = rng.normal(size=(60, 3)) * 2
    scale = rng.uniform(0.5, 2, size=3)
    moves = nearest_other_leaf(tree, X, scale)
    reached = moves.leaf >= 0
    own = tree.predict(X)
    np.testing.assert_array_equal(tree.apply(X[reached] + moves.delta[reached]), moves.leaf[reached])
    assert (moves.label[reached] != own[reached]).all()
    np.testing.assert_allclose(moves.distance[reached], np.linalg.norm(moves.delta[reached] / scale, axis=1))
    if not oblique:  # no other-cluster leaf is nearer: brute force over every leaf's box
        from pipeline.trees import leaf_moves

        margin, _ = path_margins(tree, X, scale)
        assert np.all(margin[reached] <= moves.distance[reached] + 1e-9)  # leaving needs at least the margin
        boxes = {leaf: leaf_moves._box(tree, path, 3) for leaf, path in leaf_moves._paths(tree).items()}
        reachable = np.array([any(b is not None and tree.label[leaf] != o for leaf, b in boxes.items()) for o in own])
        np.testing.assert_array_equal(reached, reachable)  # every non-empty box of another cluster can be reached
        for leaf, box in boxes.items():
            rows = reached & (own != tree.label[leaf])
            if box is None or not rows.any():
                continue
            d = np.linalg.norm(leaf_moves._move_into_box(X[rows], box) / scale, axis=1)
            assert np.all(moves.distance[rows] <= d + 1e-9)


# ------------------------------------------------------------------ the documented commands
DOC = ROOT / "docs" / "explain.md"


def doc_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_commands_and_snippet_run(tmp_path):
    """docs/explain.md's bash block, line by line, then its Python block, in a fresh folder."""
    import shlex

    from sklearn.datasets import load_iris

    iris = load_iris(as_frame=True).frame.drop(columns="target")
    iris.sample(20, random_state=0).to_csv(tmp_path / "new_flowers.csv", index=False)
    extra = {"pipeline": [f"paths.cache_dir={tmp_path / 'cache'}", "report.figures=false"],
             "pipeline.explain": [f"paths.cache_dir={tmp_path / 'cache'}"]}
    lines = [ln for ln in doc_blocks("bash")[0].splitlines() if ln.strip()]
    assert len(lines) == 3
    for line in lines:
        args = shlex.split(line)
        assert args[:2] == ["python", "-m"]
        proc = subprocess.run([sys.executable, *args[1:], *extra[args[2]]], env=ENV, cwd=tmp_path,
                              capture_output=True, text=True)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
    assert len(pd.read_parquet(tmp_path / "outputs" / "iris-new" / "explanations.parquet")) == 20
    assert len(list((tmp_path / "outputs" / "iris" / "explanations").glob("iris-*/explanations.parquet"))) == 1
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        exec(compile(doc_blocks("python")[0], "docs/explain.md[python]", "exec"), {})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "outputs" / "iris-explainer" / "SHA256SUMS").is_file()


def test_every_documented_explain_command_composes(tmp_path):
    """Every `python -m pipeline.explain` line of README.md and docs/*.md names data that compose
    (the quick-start block above also runs them to the end)."""
    import shlex

    from pipeline.app.explain_run import OWN_KEYS, _compose

    lines = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console|shell)?\n(.*?)```", path.read_text(), flags=re.S):
            lines += [ln.split(" #")[0].strip() for ln in block.replace("\\\n", " ").splitlines()
                      if ln.strip().startswith("python -m pipeline.explain ")]
    assert len(lines) >= 3
    for line in lines:
        args = [a for a in shlex.split(line)[4:] if a.split("=", 1)[0] not in OWN_KEYS]
        cfg = _compose(args, tmp_path)
        assert cfg["dataset"]["name"]


@pytest.mark.slow
def test_the_default_mnist_run_re_explains_its_own_digits(tmp_path):
    """The default run (VaDE -> GMM -> measured concepts' CAVs -> Concept-MMDT + Concept-CART; VaDE is
    trained on first use into models/, 3.5 min of a core): its 5,000 digits, re-embedded from their
    pixels by the checkpoint the bundle names, get the run's own assignments from every tree."""
    from pipeline import ConceptExplainer

    run_dir, _, done, fits = finished_run(tmp_path, "threads=1")
    ex = ConceptExplainer.load(run_dir)
    assert ex.bundle_.doc["encoder"]["checkpoint_sha256"] == done["encode"].artifact.checkpoint_sha256
    df = ex.explain(done["load"].artifact.inputs)
    np.testing.assert_array_equal(df["reference"].to_numpy(), done["cluster"].artifact.labels)
    for row, fit in fits.items():
        np.testing.assert_array_equal(df[f"{row}.cluster"].to_numpy(), fit.predictions)
    assert "P(loop)" in df.columns and not any("†" in c for c in df.columns)  # measured, no class-defined concept


def test_bundle_column_summaries_equal_numpys():
    """The bundle's per-column min, max and standard deviation of in-memory coordinates, two passes
    over blocks (np.std widened a temporary of every row): min/max exact, std to rounding."""
    from pipeline.app.explainer.explainer_bundle import _coordinates

    rng = np.random.default_rng(0)
    for shape in ((5, 3), (70_000, 20), (1, 2)):
        X = rng.normal(3.0, 2.0, shape) * np.resize([1e-150, 1.0, 1e150], shape[1])  # wide scales, no overflow
        got, (low, high, std) = _coordinates(X)
        assert got is X or np.array_equal(got, X)
        assert np.array_equal(low, X.min(axis=0)) and np.array_equal(high, X.max(axis=0))
        np.testing.assert_allclose(std, X.std(axis=0), rtol=1e-12)
