"""The README's Python snippets run, so the docs cannot drift from the code."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "README.md"))))
def test_readme_python_snippet_runs(index):
    code = python_blocks(ROOT / "README.md")[index]
    exec(compile(code, f"README.md[python block {index}]", "exec"), {})


def test_readme_names_the_two_commands_and_ci_runs_the_test_command():
    text = (ROOT / "README.md").read_text()
    assert "make run" in text and "make test" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def documented_make_targets() -> list[str]:
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    return sorted(set(re.findall(r"`make ([a-z][a-z-]*)", text)))


#: what each documented target must end by running (its last recipe line)
MAKE_RUNS = {"run": "-m pipeline", "test": "-m pytest", "test-all": "-m pytest -m \"slow or not slow\"",
             "browser": "scripts/install_browser.sh", "real-data": "scripts/install_real_data.sh",
             "install": "touch"}  # install: the whole set-up, ending by stamping the venv


@pytest.mark.parametrize("target", documented_make_targets())
def test_every_documented_make_target_runs_what_the_docs_say(target, tmp_path):
    """`make -n` (nothing executed) on every `make <target>` of README.md and docs/*.md: the target
    exists and its last command is the documented one (the set-up step before it is install's)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    assert target in MAKE_RUNS, f"`make {target}` is documented: add what it runs to MAKE_RUNS"
    stamp = tmp_path / "installed"
    if target != "install":
        stamp.touch()  # an installed venv: the dry run shows only the target's own recipe
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # CI runs us in make
    proc = subprocess.run(["make", "--no-print-directory", "-n", target, f"STAMP={stamp}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert MAKE_RUNS[target] in proc.stdout.strip().splitlines()[-1], proc.stdout


def test_make_install_with_a_torch_index_installs_torch_from_it_first(tmp_path):
    """README: `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` (no CUDA libraries):
    torch and torchvision come from that index, within pyproject's bounds, before the project."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    index = "https://download.pytorch.org/whl/cpu"
    assert f"make install TORCH_INDEX={index}" in (ROOT / "README.md").read_text()
    proc = subprocess.run(["make", "--no-print-directory", "-n", "install", f"TORCH_INDEX={index}",
                           f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    torch_line = next(i for i, line in enumerate(lines) if f'--index-url "{index}"' in line)
    assert torch_line < next(i for i, line in enumerate(lines) if 'pip install -e ".[all]"' in line)
    pyproject = (ROOT / "pyproject.toml").read_text()
    for spec in re.findall(r'"(torch(?:vision)?[<>=][^"]*)"', "\n".join(lines[torch_line - 1:torch_line + 1])):
        assert f'"{spec}"' in pyproject, spec  # the same bounds as the project's dependencies


def test_make_install_compiles_the_numba_kernels_before_stamping(tmp_path):
    """`make install` runs scripts/warm_kernels.py (issue 50, item 7) after the project is installed."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    lines = subprocess.run(["make", "--no-print-directory", "-n", "install", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                           env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    warm = next(i for i, line in enumerate(lines) if "scripts/warm_kernels.py" in line)
    assert next(i for i, line in enumerate(lines) if 'pip install -e ".[all]"' in line) < warm < len(lines) - 1


@pytest.mark.slow
def test_after_the_warm_up_a_run_compiles_no_kernel(tmp_path):
    """scripts/warm_kernels.py into a fresh NUMBA_CACHE_DIR, then the 1M command's code path on other
    data (out of core): numba's cache gains no kernel."""
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "warm_kernels.py")], env=env, check=True, timeout=1800,
                   capture_output=True)
    kernels = sorted((tmp_path / "numba").rglob("*.nbc"))
    assert len(kernels) >= 30
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import warm_kernels
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    (tmp_path / "data").mkdir()
    args = warm_kernels.make_data(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args, "dataset.memory_budget=8MB", "clustering.n_clusters=7",
                           f"hydra.run.dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted((tmp_path / "numba").rglob("*.nbc")) == kernels
