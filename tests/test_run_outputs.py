"""A rerun of an unchanged run restores its files and summary from the cache (issue 35: the warm
run), verified file by file; anything that changes a stage or an option, ``+force`` and a damaged
entry compute instead."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run

BASE = ["experiment=raw_features", "dataset=iris", "explainer=[mmdt,imm]", "report.figures=false"]


def cfg(tmp_path: Path, out: str, *extra: str):
    return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.models_dir={tmp_path / 'models'}", *BASE, *extra])


def files_of(folder: Path, computed: bool = False) -> dict[str, bytes]:
    """The run's files; ``computed``: without the explainer bundle's creation time and the digest
    of its content (two runs that each wrote their files differ there only)."""
    from pipeline.app.stores.run_outputs import run_files

    out = {rel: (folder / rel).read_bytes() for rel in run_files(folder)}
    if computed:
        doc = json.loads(out.pop("explainer/explainer.json"))
        doc.pop("created")
        doc.pop("content_sha256")  # a digest of the content, creation time included
        out["explainer/explainer.json"] = json.dumps(doc).encode()
        out.pop("explainer/SHA256SUMS")
    return out


def events(tmp_path: Path, out: str) -> list[dict]:
    return json.loads((tmp_path / out / "status.json").read_text())["cache"]


def test_rerun_restores_the_same_files_and_summary(tmp_path, capsys):
    first = run(cfg(tmp_path, "a"))
    printed_a = capsys.readouterr().out
    second = run(cfg(tmp_path, "b"))
    printed_b = capsys.readouterr().out
    # the load stage gives the keys (the dataset is read back); no other stage is touched
    assert [(e["stage"], e["hit"]) for e in events(tmp_path, "b")] == [("load", True), ("outputs", True)]
    a, b = files_of(tmp_path / "a"), files_of(tmp_path / "b")
    assert a == b and "report.html" in a and "explainer/explainer.json" in a and "results.csv" in a
    assert str(tmp_path / "a") not in a["report.html"].decode()  # no file names the folder it was written in
    assert printed_b == printed_a.replace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert "results written to " + str(tmp_path / "b" / "results.csv") in printed_b
    assert first.equals(second)


def test_a_folder_with_an_earlier_runs_files_is_not_restored_into(tmp_path):
    run(cfg(tmp_path, "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.csv").write_text("an earlier run's results\n")
    run(cfg(tmp_path, "b"))
    assert "outputs" not in {e["stage"] for e in events(tmp_path, "b")}


def test_only_the_files_the_run_wrote_are_kept(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("a user's own file, there before the run\n")
    run(cfg(tmp_path, "a"))
    [entry] = (tmp_path / "cache" / "outputs").iterdir()
    kept = json.loads((entry / "manifest.json").read_text())["files"]
    assert "results.csv" in kept and "notes.txt" not in kept
    run(cfg(tmp_path, "b"))
    assert not (tmp_path / "b" / "notes.txt").exists()


def test_a_changed_option_or_force_computes(tmp_path):
    run(cfg(tmp_path, "a"))
    run(cfg(tmp_path, "b", "report.max_rules=3"))  # an option of the report only: the stages hit, the files not
    stages = {e["stage"] for e in events(tmp_path, "b")}
    assert "outputs" not in stages and "cluster" in stages
    run(cfg(tmp_path, "c", "+force=report"))
    assert "outputs" not in {e["stage"] for e in events(tmp_path, "c")}
    run(cfg(tmp_path, "d", "cache.enabled=false"))
    assert "outputs" not in {e["stage"] for e in events(tmp_path, "d")}
    assert files_of(tmp_path / "a", True) == files_of(tmp_path / "c", True)  # (d timed its own fits)
    assert files_of(tmp_path / "a").keys() == files_of(tmp_path / "d").keys()


def test_a_damaged_entry_is_quarantined_and_the_run_computes(tmp_path, caplog):
    run(cfg(tmp_path, "a"))
    [entry] = (tmp_path / "cache" / "outputs").iterdir()
    csv = entry / "files" / "results.csv"
    data = csv.read_bytes()
    os.unlink(csv)  # the entry's copy (a link to the run's file): replace it, not the run's file
    csv.write_bytes(data.replace(b"mmdt", b"MMDT", 1))
    with caplog.at_level(logging.WARNING, logger="pipeline.app.stores.cache"):
        run(cfg(tmp_path, "b"))
    assert any("'outputs'" in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    assert list((tmp_path / "cache" / ".quarantine" / "outputs").iterdir())
    assert "outputs" not in {e["stage"] for e in events(tmp_path, "b")}
    assert files_of(tmp_path / "a", True) == files_of(tmp_path / "b", True)
    assert not [p for p in (tmp_path / "b").rglob(".*.tmp")]  # nothing half-restored stays behind
    run(cfg(tmp_path, "c"))  # the run kept its files again
    assert [e["stage"] for e in events(tmp_path, "c")] == ["load", "outputs"]


def test_files_that_cannot_be_kept_are_a_warning_not_a_failed_run(tmp_path, caplog, monkeypatch):
    import shutil

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", full)
    monkeypatch.setattr(shutil, "copyfile", full)
    with caplog.at_level(logging.WARNING, logger="pipeline.app.stores.run_outputs"):
        df = run(cfg(tmp_path, "a"))
    assert len(df) and (tmp_path / "a" / "results.csv").exists()
    assert any("not kept for reruns" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)
    assert not list((tmp_path / "cache" / "outputs").iterdir())  # no half-written entry


def test_config_checks_are_skipped_only_for_a_config_that_passed_them(tmp_path):
    from pipeline.app.stores.cache import StageCache
    from pipeline.app.stores.run_outputs import checked_before
    from pipeline.app.running.runner import to_plain
    from pipeline.validation import InvalidInputError

    run(cfg(tmp_path, "a"))
    cache = StageCache(tmp_path / "cache")
    assert checked_before(cache, to_plain(cfg(tmp_path, "b")))  # another run folder, the same run
    assert not checked_before(cache, to_plain(cfg(tmp_path, "b", "report.max_rules=3")))
    with pytest.raises(InvalidInputError, match="no parameter"):
        run(cfg(tmp_path, "c", "+explainer.imm.params.n_leafs=3"))
    with pytest.raises(InvalidInputError, match="no parameter"):  # still refused: a failed check is never noted
        run(cfg(tmp_path, "d", "+explainer.imm.params.n_leafs=3"))


def test_figures_encoded_by_worker_processes_equal_one_threads(tmp_path):
    """threads=2 encodes the report's figures (files and the page's SVGs) in worker processes
    while the report goes on: the same files, byte for byte, as threads=1 draws in this process."""
    def files(out: str, threads: int) -> dict[str, bytes]:
        run(cfg(tmp_path, out, "report.figures=true", f"threads={threads}", "cache.enabled=false"))
        return files_of(tmp_path / out, computed=True)

    import re

    one, two = files("one", 1), files("two", 2)
    figures = [name for name in one if name.startswith("figures/")]
    assert sorted(one) == sorted(two) and len(figures) == 14  # two trees, seven files each
    assert all(one[name] == two[name] for name in figures)
    svgs = [re.findall(rb"<svg.*?</svg>", page, re.S) for page in (one["report.html"], two["report.html"])]
    assert len(svgs[0]) == 2 and svgs[0] == svgs[1]  # (fit times and the threads setting differ on the page)
