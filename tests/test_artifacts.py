"""Typed artifacts between stages (issue 23): every stage declares a frozen dataclass, the cache
round-trips it, and code that reads an artifact reads fields the type declares."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.stores import artifacts
from pipeline.app.stores.artifacts import (ArtifactFieldError, ClusterArtifact, ConceptsArtifact, EncodeArtifact,
                                    FitArtifact, LoadArtifact)
from pipeline.app.stores.cache import StageCache
from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import to_plain
from pipeline.app.stages import declared_stages
from pipeline.app.stages.framework import Stage, execute

APP = Path(artifacts.__file__).resolve().parents[1]  # src/pipeline/app
TYPES = {name: cls for name, cls in vars(artifacts).items()
         if inspect.isclass(cls) and issubclass(cls, artifacts.Artifact) and cls is not artifacts.Artifact}


def test_every_declared_stage_names_a_frozen_artifact_type(tmp_path):
    cfg = to_plain(compose_config(["dataset=iris", "explainer=[mmdt,cart]", "concepts=mnist_geometric",
                                   "counterfactuals=dbm", f"paths.output_dir={tmp_path}"]))
    for stage in declared_stages(cfg):
        assert stage.artifact in TYPES.values(), stage.name
        assert stage.artifact.__dataclass_params__.frozen


def test_records_round_trip_and_unknown_fields_are_refused():
    a = ClusterArtifact(labels=np.array([0, 1, 1]), method="gmm", means=np.zeros((2, 2)),
                        covariances=np.stack([np.eye(2)] * 2), weights=np.array([0.5, 0.5]))
    record = a.to_record()
    assert "centers" not in record and "graph_row" not in record  # None fields are left out, as before
    b = ClusterArtifact.from_record(record)
    assert b.method == "gmm" and b.provided() == {"labels", "mixture"} and b.mixture()[1].shape == (2, 2)
    with pytest.raises(ArtifactFieldError, match="no field.*'centres'"):
        ClusterArtifact.from_record({**record, "centres": np.zeros((2, 2))})
    with pytest.raises(ArtifactFieldError, match="method"):
        ClusterArtifact.from_record({"labels": np.zeros(3)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.method = "kmeans"
    assert not ConceptsArtifact().enabled and ConceptsArtifact.from_record({}) == ConceptsArtifact()


def test_a_cached_stage_returns_its_type_from_the_cache_and_refuses_another(tmp_path):
    calls = []

    def compute(cfg):
        calls.append(1)
        return LoadArtifact(name="toy", kind="tabular", X=np.ones((3, 2)), y=np.array([0, 1, 1]))

    stage = Stage("load", (), lambda cfg: {}, compute, artifact=LoadArtifact)
    first = execute(stage, {}, StageCache(tmp_path), {}).artifact
    again = execute(stage, {}, StageCache(tmp_path), {}).artifact
    assert isinstance(again, LoadArtifact) and len(calls) == 1
    np.testing.assert_array_equal(first.X, again.X)
    wrong = Stage("fit.x", (), lambda cfg: {}, lambda cfg: {"row": "x"}, store="fit", artifact=FitArtifact)
    with pytest.raises(TypeError, match="returned dict, not its FitArtifact"):
        execute(wrong, {}, StageCache(tmp_path), {})


def _members(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} | {n for n in dir(cls) if not n.startswith("__")}


def artifact_reads() -> list[tuple[str, int, str, str]]:
    """(file, line, artifact type, attribute) of every ``param.attr`` where ``param`` is annotated
    with an artifact type in a function of the application layer."""
    out = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            typed = {}
            for arg in fn.args.args + fn.args.kwonlyargs:
                ann = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                names = [t for t in TYPES if t in ann.replace("|", " ").split()]
                if len(names) == 1:
                    typed[arg.arg] = names[0]
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in typed:
                    out.append((str(path.relative_to(APP)), node.lineno, typed[node.value.id], node.attr))
    return out


def test_code_reads_only_fields_the_artifact_types_declare():
    reads = artifact_reads()
    assert len(reads) > 60  # the stages, the reports and the runner read typed artifacts
    wrong = [f"{f}:{line} {t}.{attr}" for f, line, t, attr in reads if attr not in _members(TYPES[t])]
    assert not wrong, "reads of fields the artifact types do not declare:\n" + "\n".join(wrong)


def test_a_misspelt_field_is_found_by_that_check(tmp_path, monkeypatch):
    probe = APP / "stages" / "_probe_artifact_typo.py"
    probe.write_text("from pipeline.app.stores.artifacts import EncodeArtifact\n\n\n"
                     "def f(encode: EncodeArtifact):\n    return encode.latent_X\n")
    try:
        reads = artifact_reads()
    finally:
        probe.unlink()
    assert any(t == "EncodeArtifact" and attr == "latent_X" and attr not in _members(EncodeArtifact)
               for _, _, t, attr in reads)
    assert "latent_X" not in _members(EncodeArtifact) and "Z" in _members(EncodeArtifact)
