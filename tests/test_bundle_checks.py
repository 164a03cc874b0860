"""A saved explainer is verified, not only checksummed (issue 51, item 1; docs/explain.md "What is checked").

Every way a bundle can be damaged, edited or mixed up with another run's files is refused with
one paragraph naming the file, the field and what is wrong; the formats ``sha256sum`` writes are
read; a property test changes, adds, removes or renames any one file (``SHA256SUMS`` recomputed
or not) and checks the bundle is refused, or loads with nothing that matters changed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.validation import InvalidInputError

FILES = ["SHA256SUMS", "explainer.json", "arrays.npz", "trees/cart.json", "trees/mmdt.json"]
# the tampering helpers of the edge battery's issue-51 cases (SHA256SUMS recomputed after each edit)
_spec = importlib.util.spec_from_file_location(
    "edge_battery_issue51", Path(__file__).resolve().parents[1] / "benchmarks" / "edge_battery_issue51.py")
_battery = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_battery)
resum, edit_json, edit_arrays = _battery.resum, _battery.edit_json, _battery.edit_arrays


def _run(tmp: Path, *overrides: str) -> Path:
    out = tmp / "run"
    run(compose_config([*overrides, f"paths.output_dir={out}", f"paths.cache_dir={tmp / 'cache'}",
                        "report.figures=false", "report.html=false", "report.summary=false"]))
    return out / "explainer"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """(the iris run's bundle, another iris run's bundle: k-means, trees of the same width)."""
    return (_run(tmp_path_factory.mktemp("gmm"), "dataset=iris"),
            _run(tmp_path_factory.mktemp("kmeans"), "dataset=iris", "clustering=kmeans"))


def copy(bundle: Path, tmp_path: Path, name: str = "b") -> Path:
    dest = tmp_path / name
    shutil.copytree(bundle, dest)
    return dest


def load(folder: Path):
    from pipeline import ConceptExplainer

    return ConceptExplainer.load(folder)


def refused(folder: Path, *words: str) -> str:
    """The refusal's message, which must be one paragraph containing every one of ``words``."""
    with pytest.raises(InvalidInputError) as info:
        load(folder)
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


# ------------------------------------------------------------------ SHA256SUMS in sha256sum's formats
def test_a_saved_bundle_records_what_it_is_checked_against(bundles):
    from pipeline.app.explainer.bundle_checks import content_digest

    doc = json.loads((bundles[0] / "explainer.json").read_text())
    assert doc["version"] == 3 and doc["content_sha256"] == content_digest(doc)
    with np.load(bundles[0] / "arrays.npz") as z:
        assert set(doc["arrays"]) == set(z.files) and {"input_bounds", "input_rms", "latent_rms"} <= set(z.files)
    for row, info in doc["trees"].items():
        assert info["name"] == row and info["feature_names"] == doc["features"]["names"] and len(info["sha256"]) == 64


@pytest.mark.parametrize("form", ["binary", "upper", "crlf", "tag", "dot-slash", "escaped", "no-final-newline"])
def test_sha256sums_in_every_format_sha256sum_writes_is_read(bundles, tmp_path, form):
    folder = copy(bundles[0], tmp_path)
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    digest, names = [ln[:64] for ln in lines], [ln[66:] for ln in lines]
    text = {"binary": "".join(f"{d} *{n}\n" for d, n in zip(digest, names)),
            "upper": "".join(f"{d.upper()}  {n}\n" for d, n in zip(digest, names)),
            "crlf": "".join(f"{d}  {n}\r\n" for d, n in zip(digest, names)),
            "tag": "".join(f"SHA256 ({n}) = {d}\n" for d, n in zip(digest, names)),
            "dot-slash": "".join(f"{d}  ./{n}\n" for d, n in zip(digest, names)),
            "escaped": "".join(f"\\{d}  {n}\n" for d, n in zip(digest, names)),  # sha256sum's escaped-name lines
            "no-final-newline": "\n".join(f"{d}  {n}" for d, n in zip(digest, names))}[form]
    (folder / "SHA256SUMS").write_bytes(text.encode())
    X = np.random.default_rng(0).normal(5, 1, (20, 4))
    np.testing.assert_array_equal(load(folder).predict(X, tree="cart"), load(bundles[0]).predict(X, tree="cart"))


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="no sha256sum on this machine")
@pytest.mark.parametrize("mode", ["--text", "--binary", "--tag"])
def test_sha256sums_written_by_sha256sum_itself_is_read(bundles, tmp_path, mode):
    folder = copy(bundles[0], tmp_path)
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    out = subprocess.run(["sha256sum", mode, *names], cwd=folder, capture_output=True, check=True).stdout
    (folder / "SHA256SUMS").write_bytes(out)
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=folder).returncode == 0
    assert load(folder).tree_names_ == ["mmdt", "cart"]


@pytest.mark.parametrize("cut", ["mid-line", "line-boundary"])
def test_a_truncated_sha256sums_is_refused(bundles, tmp_path, cut):
    folder = copy(bundles[0], tmp_path)
    data = (folder / "SHA256SUMS").read_bytes()
    half = len(data) // 2 if cut == "mid-line" else data.index(b"\n", len(data) // 2) + 1
    (folder / "SHA256SUMS").write_bytes(data[:half])
    if cut == "mid-line":
        refused(folder, "SHA256SUMS, line", "is not a checksum line", "cut short")
    else:
        refused(folder, "SHA256SUMS", "does not list", "cut short (files left unchecked)")


# ------------------------------------------------------------------ nothing outside the bundle
@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "trees/../../x.json", "C:/x.json"])
def test_a_name_pointing_outside_the_bundle_is_refused(bundles, tmp_path, name):
    folder = copy(bundles[0], tmp_path)
    edit_json(folder, lambda doc: doc["trees"]["cart"].update(file=name))
    refused(folder, "explainer.json, field trees.cart.file", "points outside the bundle")
    sums = copy(bundles[0], tmp_path, "s")
    with open(sums / "SHA256SUMS", "a") as fh:
        fh.write(f"{'0' * 64}  {name}\n")
    refused(sums, "SHA256SUMS lists", "points outside the bundle")


def test_links_and_special_files_are_refused(bundles, tmp_path):
    folder = copy(bundles[0], tmp_path)
    (folder / "trees" / "cart.json").unlink()
    os.symlink("/etc/passwd", folder / "trees" / "cart.json")
    refused(folder, "trees/cart.json is a symbolic link (to /etc/passwd)")
    inner = copy(bundles[0], tmp_path, "inner")
    os.symlink("cart.json", inner / "trees" / "alias.json")  # a link even inside: a bundle holds plain files only
    refused(inner, "trees/alias.json", "symbolic link")
    fifo = copy(bundles[0], tmp_path, "fifo")
    os.mkfifo(fifo / "pipe")
    refused(fifo, "pipe", "not a regular file")


# ------------------------------------------------------------------ every file listed, every listed file present
def test_added_removed_and_renamed_files_are_named(bundles, tmp_path):
    added = copy(bundles[0], tmp_path, "added")
    (added / "notes.txt").write_text("hello")
    refused(added, "does not list notes.txt", "added after saving")
    resum(added)
    refused(added, "lists notes.txt, which explainer.json does not name")
    removed = copy(bundles[0], tmp_path, "removed")
    (removed / "trees" / "cart.json").unlink()
    refused(removed, "lacks trees/cart.json, which SHA256SUMS lists")
    resum(removed)
    refused(removed, "explainer.json", "names trees/cart.json, which the bundle does not hold")
    renamed = copy(bundles[0], tmp_path, "renamed")
    os.rename(renamed / "trees" / "cart.json", renamed / "trees" / "cart2.json")
    resum(renamed)
    refused(renamed, "names trees/cart.json, which the bundle does not hold", "renamed or removed")


# ------------------------------------------------------------------ each tree against explainer.json
def as_version_1(folder: Path) -> None:
    """The bundle as format version 1 wrote it (no digests in explainer.json)."""
    def strip(doc):
        doc.update(version=1)
        for key in ("content_sha256", "arrays"):
            doc.pop(key)
        for info in doc["trees"].values():
            for key in ("name", "feature_names", "sha256"):
                info.pop(key)
    edit_json(folder, strip)


@pytest.mark.parametrize("version", [3, 1])
def test_a_tree_replaced_by_another_runs_tree_of_the_same_width_is_refused(bundles, tmp_path, version):
    folder = copy(bundles[0], tmp_path)
    if version == 1:
        as_version_1(folder)
        assert load(folder).tree_names_ == ["mmdt", "cart"]  # a version-1 bundle still loads
    shutil.copy(bundles[1] / "trees" / "cart.json", folder / "trees" / "cart.json")
    resum(folder)
    message = refused(folder, "trees/cart.json (explainer.json, trees.cart.")
    if version == 3:
        assert "differ from those explainer.json records" in message
    else:
        assert "not the same tree's" in message or "replaced after saving" in message


def test_an_edited_explainer_json_is_refused_even_with_sha256sums_recomputed(bundles, tmp_path):
    folder = copy(bundles[0], tmp_path)
    edit_json(folder, lambda doc: doc["trees"]["cart"]["training"].update(ari=0.99))
    refused(folder, "explainer.json, field content_sha256", "edited after saving")
    arrays = copy(bundles[0], tmp_path, "arrays")
    shutil.copy(bundles[1] / "arrays.npz", arrays / "arrays.npz")  # another run's arrays, the same shapes
    resum(arrays)
    refused(arrays, "arrays.npz")


# ------------------------------------------------------------------ broken contents: one paragraph, never a raw error
def _cov_not_pd(a):
    a["ref_covariances"][0] = -a["ref_covariances"][0]


def _cov_asymmetric(a):
    a["ref_covariances"][1, 0, 1] += 1.0


BROKEN = {
    "invalid JSON": (lambda f: ((f / "explainer.json").write_text((f / "explainer.json").read_text()[:-30]), resum(f)),
                     ["explainer.json", "not valid JSON", "line"]),
    "field of the wrong type": (lambda f: edit_json(f, lambda d: d["features"].update(names="petal")),
                                ["explainer.json, field features.names", "not a list"]),
    "field of the wrong size": (lambda f: edit_json(f, lambda d: d["input"].update(feature_names=["a"])),
                                ["explainer.json, field input.feature_names", "lists 1 names for inputs of 4"]),
    "missing field": (lambda f: edit_json(f, lambda d: d["reference"].pop("assign")),
                      ["explainer.json, field reference.assign", "is missing"]),
    "covariance not positive definite": (lambda f: edit_arrays(f, _cov_not_pd),
                                         ["arrays.npz, array ref_covariances[0]", "not positive definite"]),
    "covariance not symmetric": (lambda f: edit_arrays(f, _cov_asymmetric),
                                 ["arrays.npz, array ref_covariances[1]", "not symmetric"]),
    "weights not summing to 1": (lambda f: edit_arrays(f, lambda a: a.update(ref_weights=a["ref_weights"] * 0.5)),
                                 ["arrays.npz, array ref_weights", "summing to 1"]),
    "missing array": (lambda f: edit_arrays(f, lambda a: a.pop("ref_means")), ["arrays.npz", "lacks", "ref_means"]),
    "array of the wrong shape": (lambda f: edit_arrays(f, lambda a: a.update(feature_scale=np.ones((4, 2)))),
                                 ["arrays.npz, array feature_scale", "has shape (4, 2)"]),
    "NaN in an array": (lambda f: edit_arrays(f, lambda a: a["ref_means"].__setitem__((0, 0), np.nan)),
                        ["arrays.npz, array ref_means", "NaN"]),
    "strings for numbers": (lambda f: edit_arrays(f, lambda a: a.update(feature_min=np.array(list("abcd")))),
                            ["arrays.npz, array feature_min", "dtype <U1"]),
    "unknown array": (lambda f: edit_arrays(f, lambda a: a.update(ref_precisions_cholesky=np.eye(4)[None])),
                      ["arrays.npz"]),
    "not an npz": (lambda f: ((f / "arrays.npz").write_bytes(b"not a zip"), resum(f)),
                   ["arrays.npz", "not a readable .npz"]),
    "tree JSON cut short": (lambda f: ((f / "trees/cart.json").write_text((f / "trees/cart.json").read_text()[:50]),
                                       resum(f)), ["trees/cart.json", "not valid JSON"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_contents_are_one_paragraph_naming_file_and_field(bundles, tmp_path, case):
    folder = copy(bundles[0], tmp_path)
    damage, words = BROKEN[case]
    damage(folder)
    refused(folder, *words)


def test_a_used_explainer_saves_no_derived_arrays(bundles, tmp_path):
    ex = load(bundles[0])
    ex.predict(np.ones((3, 4)))  # computes the mixture's precisions
    saved = ex.save(tmp_path / "saved")
    with np.load(saved / "arrays.npz") as z:
        assert "ref_precisions_cholesky" not in z.files
    assert load(saved).predict(np.ones((3, 4))).tolist() == ex.predict(np.ones((3, 4))).tolist()


# ------------------------------------------------------------------ the property: never loaded silently
KINDS = ("modified or damaged after it was saved", "is not a checksum line", "does not list", "lacks",
         "which explainer.json does not name", "which the bundle does not hold", "content_sha256", "not valid JSON",
         "not a readable .npz", "differ from those explainer.json records", "differs from the array", "no SHA256SUMS",
         "does not list explainer.json", "is not a saved explainer", "is not UTF-8")


def _snapshot(ex) -> tuple:
    X = np.random.default_rng(1).normal(4, 2, (40, 4))
    return (json.dumps(ex.bundle_.doc, sort_keys=True), {k: v.tobytes() for k, v in ex.bundle_.arrays.items()},
            {k: t.to_json() for k, t in ex.trees_.items()}, ex.explain(X).to_json())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(FILES), op=st.sampled_from(["flip", "truncate", "replace", "delete", "rename", "add"]),
       where=st.floats(0, 1, exclude_max=True), byte=st.integers(1, 255), recompute=st.booleans(),
       new_name=st.sampled_from(["trees/extra.json", "notes.txt", "weights/x.pt", "arrays.npz.bak", "explainer.JSON"]))
def test_any_single_file_changed_added_removed_or_renamed_is_refused_or_immaterial(
        bundles, tmp_path_factory, target, op, where, byte, recompute, new_name):
    import logging

    folder = copy(bundles[0], tmp_path_factory.mktemp("p"))
    path = folder / target
    if op == "flip":
        data = bytearray(path.read_bytes())
        data[int(where * len(data))] ^= byte
        path.write_bytes(bytes(data))
    elif op == "truncate":
        path.write_bytes(path.read_bytes()[:int(where * path.stat().st_size)])
    elif op == "replace":
        shutil.copy(bundles[1] / target, path)
    elif op == "delete":
        path.unlink()
    elif op == "rename":
        (folder / new_name).parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, folder / new_name)
    else:
        (folder / new_name).parent.mkdir(parents=True, exist_ok=True)
        (folder / new_name).write_bytes(bytes([byte]) * 10)
    if recompute:
        resum(folder)
    logging.disable(logging.WARNING)  # the package-version note is not what is checked
    try:
        ex = load(folder)
    except InvalidInputError as exc:
        message = str(exc)
        event("refused: " + next((k for k in KINDS if k in message), "other"))
        assert "\n" not in message
        assert any(name in message for name in [*FILES, new_name, "SHA256SUMS", str(folder)]), message
        return
    finally:
        logging.disable(logging.NOTSET)
    # it loaded: then nothing it reads changed (a SHA256SUMS recomputed over unchanged files, a
    # zip's metadata the arrays do not depend on, ...)
    event(f"loaded, nothing changed: {target} {op}")
    assert _snapshot(ex) == _snapshot(load(bundles[0])), (target, op)


def test_copied_weights_are_part_of_the_bundle_and_stay_inside_it(bundles, tmp_path):
    """A bundle saved with copy_weights=True names weights/<checkpoint> (and its sidecar): listed,
    checked, inside the folder; a copied path leading out is refused."""
    from pipeline.app.explainer.bundle_checks import content_digest
    from pipeline.app.stores.cache import file_digest

    def with_weights(folder, copied):
        (folder / "weights").mkdir()
        (folder / "weights" / "abc.pt").write_bytes(b"weights")
        (folder / "weights" / "abc.json").write_text("{}")

        def seal(doc):
            doc["encoder"].update(copied=copied, checkpoint="/elsewhere/abc.pt",
                                  checkpoint_sha256=file_digest(folder / "weights" / "abc.pt"))
            doc["content_sha256"] = content_digest(doc)  # as the writer records it
        edit_json(folder, seal)

    good = copy(bundles[0], tmp_path, "good")
    with_weights(good, "weights/abc.pt")
    assert load(good)._checkpoint_path() == good.resolve() / "weights" / "abc.pt"
    bad = copy(bundles[0], tmp_path, "bad")
    with_weights(bad, "../../abc.pt")
    refused(bad, "explainer.json, field encoder.copied", "points outside the bundle")
