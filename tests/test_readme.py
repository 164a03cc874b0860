"""The README's Python snippets run, so the docs cannot drift from the code."""

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
