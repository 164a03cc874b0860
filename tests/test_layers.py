"""The two layers stay apart and the package has no import cycles (issues 11 and 23).

LIBRARY: every module of ``pipeline`` outside ``pipeline/app/`` and the entry points
``pipeline/__main__.py`` and ``pipeline/collect.py``. APPLICATION: ``pipeline/app/`` and the
entry points, where all file, network and environment work lives (docs/ARCHITECTURE.md).

Three checks, each proved able to fail (:func:`test_every_probe_kind_fails_the_check` plants
the review's 18 kinds of forbidden code into a temporary copy of the package):

1. import-linter's contracts in ``pyproject.toml`` (a *layers* contract: the dependency
   direction; a *forbidden* contract: no app, Hydra/omegaconf, file, process or network
   packages in the library), run on the real package;
2. an AST reading of every library module: no forbidden import (top-of-file, inside functions,
   ``from x import y`` of a forbidden name, ``importlib.import_module("literal")``), no
   ``open``/``print``, file methods on any receiver (``p.open()``, ``.write_text``...), array /
   table / model files (``np.save``, ``pd.read_csv``, ``torch.save``...), ``torch.hub``, and
   no ``os.environ`` / ``getenv`` at all (reads included);
3. the import graph counting every import (:mod:`benchmarks.architecture`): no cycle and no
   arrow running back up the stated layer order.

``tests/test_library_io_guard.py`` checks the same rule at run time.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "pipeline"

_spec = importlib.util.spec_from_file_location("architecture", ROOT / "benchmarks" / "architecture.py")
architecture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(architecture)

FORBIDDEN_IMPORTS = ("pipeline.app", "hydra", "omegaconf", "torch.hub")
FORBIDDEN_MODULES = ("shutil", "urllib", "requests", "tempfile", "filelock", "subprocess", "socket", "http",
                     "pickle", "glob", "yaml", "huggingface_hub", "sentence_transformers")
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "breakpoint"}
#: attribute calls refused on any receiver (file, table and download methods)
FORBIDDEN_METHODS = {
    "open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink", "rmdir", "touch", "savefig",
    "tofile", "fromfile", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt", "to_csv",
    "to_parquet", "to_pickle", "to_json", "to_hdf", "to_excel", "read_csv", "read_parquet", "read_json",
    "read_pickle", "read_table", "read_excel", "read_hdf", "urlopen", "urlretrieve", "load_state_dict_from_url",
    "download_url_to_file", "getenv", "putenv", "unsetenv", "safe_load", "rglob",
}
#: ``os.<name>(...)``: files, processes and the environment
OS_CALLS = {"remove", "rename", "replace", "makedirs", "listdir", "scandir", "walk", "system", "popen", "chdir",
            "startfile", "execv", "fork", "kill"}
#: ``<receiver>.load(...)`` / ``.save(...)`` for receivers that read or write files (``store.save`` of
#: an object the application injected is fine)
FILE_LOADERS = {"np", "numpy", "torch", "json", "pickle", "yaml", "joblib", "pd", "pandas"}
#: names that must not be imported into the library with ``from <module> import <name>``
FORBIDDEN_NAMES = FORBIDDEN_METHODS | OS_CALLS | {"load", "save", "environ", "hub", "dump"}
FORBIDDEN_ATTRIBUTES = {"environ", "hub"}  # os.environ (reads too), torch.hub


def module_name(path: Path, src: Path = SRC) -> str:
    return architecture.module_name(path, src)


# Command-line doors into the application layer: ``python -m pipeline``, ``python -m pipeline.collect``.
ENTRY_POINTS = ("__main__.py", "collect.py", "explain.py", "__init__.py")  # the root __init__: a lazy door (ConceptExplainer)


def is_library(path: Path, package: Path = PACKAGE) -> bool:
    rel = path.relative_to(package)
    return rel.parts[0] not in ("app", "conf") and rel.as_posix() not in ENTRY_POINTS


def library_modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if is_library(p, package))


def _forbidden_module(mod: str) -> bool:
    return (any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN_IMPORTS)
            or mod.split(".")[0] in FORBIDDEN_MODULES)


def violations(path: Path, src: Path = SRC) -> list[str]:
    """Every place in library module ``path`` that breaks the layer rule, as ``file:line what``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path, src)
    where = path.relative_to(src)
    found = []
    for line, mod in architecture.imports_of(tree, name, path.name == "__init__.py"):
        if _forbidden_module(mod):
            found.append(f"{where}:{line} imports {mod}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in FORBIDDEN_NAMES:
                    found.append(f"{where}:{node.lineno} imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                found.append(f"{where}:{node.lineno} calls {f.id}()")
            elif isinstance(f, ast.Attribute):
                receiver = f.value.id if isinstance(f.value, ast.Name) else None
                if (f.attr in FORBIDDEN_METHODS or (f.attr in ("load", "save") and receiver in FILE_LOADERS)
                        or (receiver == "os" and f.attr in OS_CALLS)):
                    found.append(f"{where}:{node.lineno} calls {receiver or '<obj>'}.{f.attr}()")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"{where}:{node.lineno} uses .{node.attr}")
    return found


def graph_problems(src: Path = SRC) -> list[str]:
    """Import cycles (every import counted) and imports against the stated layer order."""
    graph = architecture.import_graph(src)
    return ([f"import cycle among {' '.join(c)}" for c in architecture.cycles(graph)]
            + [f"arrow back up the layers: {a} -> {b}" for a, b in architecture.back_arrows(graph)])


def layer_check(src: Path = SRC) -> list[str]:
    """The AST check over every library module plus the import-graph check."""
    package = src / "pipeline"
    return [v for p in library_modules(package) for v in violations(p, src)] + graph_problems(src)


def lint_imports(src: Path = SRC) -> subprocess.CompletedProcess:
    """import-linter's contracts (``pyproject.toml``) on the package under ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, env=env, cwd=src)


LIBRARY = library_modules()


def test_the_library_layer_is_not_empty_and_the_app_layer_exists():
    assert len(LIBRARY) > 30 and (PACKAGE / "app" / "running" / "runner.py").exists()


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_module_has_no_app_hydra_io_or_environment(path):
    found = violations(path)
    assert not found, ("library modules must not import the app layer / Hydra, do file or network I/O or touch the "
                       "environment; move this into pipeline/app/ (docs/ARCHITECTURE.md):\n" + "\n".join(found))


def test_no_import_cycles_and_no_arrow_back_up_counting_every_import():
    problems = graph_problems()
    assert not problems, "\n".join(problems)


def test_import_linter_contracts_hold():
    out = lint_imports()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout


#: The review's 18 probe kinds (issue 23), each a small module planted into the library.
PROBES = {
    "path_open": "def f(p):\n    return p.open().read()\n",
    "from_numpy_import_save": "from numpy import save\n\ndef f(p, a):\n    save(p, a)\n",
    "pandas_read_csv": "import pandas as pd\n\ndef f(p):\n    return pd.read_csv(p)\n",
    "from_os_import_environ": "from os import environ\n\ndef f():\n    return environ.get('HOME')\n",
    "import_module_app": "import importlib\n\ndef f():\n    return importlib.import_module('pipeline.app.stores.cache')\n",
    "torch_hub_load": "import torch\n\ndef f():\n    return torch.hub.load('a/b', 'm')\n",
    "print": "def f(x):\n    print(x)\n",
    "numpy_save": "import numpy as np\n\ndef f(p, a):\n    np.save(p, a)\n",
    "path_write_text": "from pathlib import Path\n\ndef f(p):\n    Path(p).write_text('x')\n",
    "builtin_open": "def f(p):\n    with open(p) as fh:\n        return fh.read()\n",
    "environ_write": "import os\n\ndef f():\n    os.environ['A'] = '1'\n",
    "getenv": "import os\n\ndef f():\n    return os.getenv('HOME')\n",
    "subprocess": "def f():\n    import subprocess\n    subprocess.run(['ls'])\n",
    "urlopen": "from urllib.request import urlopen\n\ndef f(u):\n    return urlopen(u).read()\n",
    "app_import_in_function": "def f():\n    from pipeline.app.stores.cache import make_key\n    return make_key\n",
    "omegaconf": "from omegaconf import OmegaConf\n",
    "torch_save": "import torch\n\ndef f(m, p):\n    torch.save(m, p)\n",
    "dunder_import_hydra": "def f():\n    return __import__('hydra')\n",
}
#: probes that are imports, which import-linter (it reads import statements) must also refuse
IMPORT_PROBES = ("omegaconf", "app_import_in_function", "urlopen", "subprocess")


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("layers") / "src"
    shutil.copytree(PACKAGE, root / "pipeline", ignore=shutil.ignore_patterns("__pycache__", "conf", "concepts_data"))
    return root


def test_the_copy_passes_before_any_probe(package_copy):
    assert layer_check(package_copy) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PROBES))
def test_every_probe_kind_fails_the_check(package_copy, kind):
    probe = package_copy / "pipeline" / "trees" / f"_probe_{kind}.py"
    probe.write_text(PROBES[kind])
    try:
        found = layer_check(package_copy)
    finally:
        probe.unlink()
    assert found and all(f"_probe_{kind}" in f for f in found), found


def test_import_linter_fails_on_the_import_probes(package_copy, tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(package_copy, copy)
    for kind in IMPORT_PROBES:
        (copy / "pipeline" / "concepts" / f"_probe_{kind}.py").write_text(PROBES[kind])
    out = lint_imports(copy)
    assert out.returncode != 0
    for kind in IMPORT_PROBES:
        assert f"pipeline.concepts._probe_{kind}" in out.stdout, (kind, out.stdout[-3000:])


@pytest.mark.parametrize("code", [
    "def f():\n    import pipeline.trees.cart\n",  # an import inside a function closing a loop
    "import importlib\n\ndef f():\n    return importlib.import_module('pipeline.trees.cart')\n",
])
def test_a_hidden_cycle_or_upward_arrow_fails_the_graph_check(package_copy, code):
    target = package_copy / "pipeline" / "validation.py"
    original = target.read_text()
    target.write_text(original + "\n\n" + code)
    try:
        problems = graph_problems(package_copy)
    finally:
        target.write_text(original)
    assert any("pipeline.validation -> pipeline.trees.cart" in p for p in problems), problems
    assert any("import cycle" in p for p in problems), problems


def test_an_identity_run_imports_no_torch():
    """``import pipeline.app.running.runner`` and the modules of an iris run stay free of torch."""
    code = ("import sys; import pipeline.app.running.runner, pipeline.app.stages.encode, pipeline.app.stages.cluster, "
            "pipeline.app.stages.fit, pipeline.app.stages.concepts, pipeline.app.stages.report, pipeline.trees, "
            "pipeline.encoders.base; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_raw_feature_iris_run_never_imports_torch_or_numba_for_mmdt(tmp_path):
    """The whole ``dataset=iris explainer=[mmdt,cart]`` run (identity encoder) stays torch-free, and
    fitting MMDT and CART imports no numba (pipeline.threads sets numba's count only when a kernel
    module loaded it)."""
    code = (
        "import sys\n"
        "from pipeline.app.configuration.config import compose_config\n"
        "from pipeline.app.running.runner import run\n"
        f"run(compose_config(['dataset=iris', 'explainer=[mmdt,cart]', 'paths.output_dir={tmp_path / 'out'}', "
        f"'paths.cache_dir={tmp_path / 'cache'}', 'report.figures=false', 'report.summary=false']))\n"
        "print('TORCH', 'torch' in sys.modules, 'NUMBA', 'numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TORCH False NUMBA False" in out.stdout


def test_no_two_modules_share_a_file_name():
    """One name, one module (issue 35): ``app/streamed.py`` beside ``app/stages/streamed.py`` was two
    different things under one name; a reader (and a traceback) must not have to guess which."""
    from collections import Counter

    src = Path(__file__).resolve().parents[1] / "src" / "pipeline"
    names = Counter(p.name for p in src.rglob("*.py") if p.name != "__init__.py")
    assert not [n for n, c in names.items() if c > 1], sorted(n for n, c in names.items() if c > 1)


def test_architecture_lists_every_module():
    """docs/ARCHITECTURE.md, "Every module", names every module of ``src/pipeline/`` (one line
    each) and nothing that is not one: a module added, moved or removed redraws the map."""
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    listed = set(re.findall(r"^- `([\w/]+\.py)`: \S", text.split("## Every module", 1)[1], flags=re.M))
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" and p.relative_to(PACKAGE).parts[0] not in ("conf", "concepts_data")}
    assert not modules - listed, f"modules missing from docs/ARCHITECTURE.md: {sorted(modules - listed)}"
    assert not listed - modules, f"docs/ARCHITECTURE.md lists modules that do not exist: {sorted(listed - modules)}"


def test_app_has_only_its_entry_code_at_the_top():
    """The application's modules live in its rooms (docs/ARCHITECTURE.md); its top holds the entry code."""
    loose = sorted(p.name for p in (PACKAGE / "app").glob("*.py"))
    assert loose == ["__init__.py", "console.py", "explain_run.py", "sweep_command.py"], loose
