"""cpu_code_path (issue 36, item 2): the entry point pins the CPU code paths that decide a run's
numbers before torch and MKL load, a user's value wins, ``native`` turns it off, and status.json
records what the run ran."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.app.startup.checks import check_code_path
from pipeline.threads import PORTABLE_CODE_PATH, cpu_code_path_environment
from pipeline.validation import InvalidInputError

SRC = Path(__file__).resolve().parents[1] / "src"
PROBE = "import os, pipeline.__main__; print({k: os.environ.get(k) for k in ('ATEN_CPU_CAPABILITY', 'MKL_CBWR')})"


def _child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_CODE_PATH and k != "PIPELINE_CPU_CODE_PATH"}
    env["PYTHONPATH"] = str(SRC)
    return {**env, **extra}


def _probe(*args, **extra) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=_child_env(**extra), capture_output=True, text=True,
                         check=True).stdout
    return eval(out)  # a dict literal printed by the child


def test_the_entry_point_pins_the_code_path_before_torch_loads():
    assert _probe() == {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None}  # native, the default
    assert _probe("cpu_code_path=portable") == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
    assert _probe(PIPELINE_CPU_CODE_PATH="portable") == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
    assert _probe(ATEN_CPU_CAPABILITY="avx512", PIPELINE_CPU_CODE_PATH="portable") == {
        "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "COMPATIBLE"}  # a user's own value wins
    assert _probe(PIPELINE_CPU_CODE_PATH="portable").keys() == _probe("cpu_code_path=native").keys()
    assert _probe("cpu_code_path=native") == {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None}


@pytest.mark.slow
def test_a_child_torch_runs_the_pinned_capability():
    torch = pytest.importorskip("torch")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("not an x86-64 CPU with AVX2")
    code = "import pipeline.__main__, torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=_child_env(PIPELINE_CPU_CODE_PATH="portable"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "AVX2"


def test_settings_are_checked():
    assert cpu_code_path_environment("native") == {}
    with pytest.raises(ValueError, match="portable"):
        cpu_code_path_environment("fast")
    with pytest.raises(InvalidInputError, match="cpu_code_path='fast'.*portable.*native"):
        check_code_path("fast")


def test_status_json_records_the_code_path_in_process(tmp_path):
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}", "dataset=iris",
                        "explainer=[cart]", "report.figures=false", "report.html=false", "report.summary=false",
                        "cpu_code_path=portable"]))
    record = json.loads((tmp_path / "run" / "status.json").read_text())["numerics"]["cpu_code_path"]
    assert record["setting"] == "portable" and set(record["environment"]) == set(PORTABLE_CODE_PATH)
    # pinned: whether this process runs the pinned paths (not when torch was imported first with others)
    assert record["pinned"] == all(os.environ.get(k) == v for k, v in PORTABLE_CODE_PATH.items())


@pytest.mark.slow
def test_status_json_records_the_code_path(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "dataset=iris", "explainer=[cart]", "report.figures=false",
                           "report.html=false", "report.summary=false", f"hydra.run.dir={tmp_path / 'run'}",
                           f"paths.cache_dir={tmp_path / 'cache'}", "cpu_code_path=portable"], env=_child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "status.json").read_text())["numerics"]["cpu_code_path"]
    assert record["setting"] == "portable" and record["pinned"] is True
    assert record["environment"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
