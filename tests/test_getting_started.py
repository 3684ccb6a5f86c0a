"""docs/getting-started.md, run as a reader would: its blocks in order, in an empty directory.

A fenced block whose first line is ``# <file name>`` (Python, TOML, YAML) is written to that file;
a ``bash`` block is run with bash, in the directory, with the virtual environment the page makes
first on ``PATH`` (as its ``. .venv/bin/activate`` leaves it for the reader's later commands); a
``text`` block is output, not run. A shell block must exit 0 unless the line before its fence is
``<!-- exit N -->``. The page installs the plugin from this checkout (``OPPERF_SRC``), into a venv
of its own, so the test needs pip to reach the packages the plugin depends on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting-started.md"
BLOCK = re.compile(r"(?:^<!-- exit (\d+) -->\n)?^```(\w*)\n(.*?)^```\n", re.M | re.S)
FILE_HEADER = re.compile(r"#\s*(\S+)\s*$")
SHELL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    exit_status: int  # for shell blocks

    @property
    def file(self) -> str | None:
        first = self.text.splitlines()[0] if self.text else ""
        match = FILE_HEADER.fullmatch(first)
        return match.group(1) if match and self.language not in ("bash", "text") else None


def blocks(text: str) -> list[Block]:
    return [Block(language, body, int(status or 0))
            for status, language, body in BLOCK.findall(text)]


def test_every_block_is_a_file_a_command_or_output():
    found = blocks(PAGE.read_text("utf-8"))
    assert found, "the page has no code blocks"
    for block in found:
        assert block.language in ("bash", "text") or block.file, (
            f"a {block.language or 'plain'} block is neither a command nor a file "
            f"(first line: {block.text.splitlines()[0]!r})")
    assert sum(b.exit_status == 1 for b in found) >= 1, "the page shows no failing gate"


def test_the_parser_reads_files_commands_and_expected_failures():
    sample = ("x\n```python\n# a/b.py\nprint(1)\n```\n<!-- exit 1 -->\n```bash\nfalse\n```\n"
              "```text\nout\n```\n")
    found = blocks(sample)
    assert [(b.language, b.file, b.exit_status) for b in found] == [
        ("python", "a/b.py", 0), ("bash", None, 1), ("text", None, 0)]


def _environment(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV", "PYTHONHOME")
           and not k.startswith(("OPPERF_", "GITHUB_"))}
    venv = project / ".venv"
    # the interpreter running these tests stands for the reader's python3 until the page's venv
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(Path(sys.executable).parent),
                                   env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    env["OPPERF_SRC"] = str(ROOT)
    env.update(GIT_AUTHOR_NAME="Reader", GIT_AUTHOR_EMAIL="reader@example.com",
               GIT_COMMITTER_NAME="Reader", GIT_COMMITTER_EMAIL="reader@example.com",
               GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", COLUMNS="100")
    return env


def test_the_page_runs_from_an_empty_directory_to_a_failing_gate(tmp_path):
    project = tmp_path / "my-model"
    project.mkdir()
    env = _environment(project)
    outputs: list[tuple[Block, str]] = []
    for block in blocks(PAGE.read_text("utf-8")):
        if block.language == "text":
            continue
        if block.file:
            path = project / block.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, "utf-8")
            continue
        done = subprocess.run(["bash", "-e", "-c", block.text], cwd=project, env=env,
                              capture_output=True, text=True, timeout=SHELL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        output = done.stdout + done.stderr
        if done.returncode != block.exit_status:
            pytest.fail(f"block exited {done.returncode}, the page says {block.exit_status}:\n"
                        f"{block.text}\n--- output (last 6000 characters) ---\n{output[-6000:]}")
        outputs.append((block, output))
        with (tmp_path / "outputs.txt").open("a", encoding="utf-8") as log:  # for a failing run
            log.write(f"$ {block.text}\n{output}\n")
    runs = [(b, out) for b, out in outputs if "pytest --opperf" in b.text]
    assert runs, "the page never runs pytest --opperf"
    for _, out in runs:
        assert "= opperf =" in out.replace("=" * 4, "="), "no opperf section in:\n" + out[-3000:]
    passing = [out for b, out in runs if b.exit_status == 0]
    failing = [out for b, out in runs if b.exit_status == 1]
    assert any("examples/sec" in out and "gate: PASSED" in out for out in passing)
    assert failing and all("gate: FAILED" in out for out in failing)
    assert any("FAIL tests/test_train.py::test_train bytecodes:sgd" in out for out in failing)
    assert any("step_ms:sgd" in out and "(A/B, exact)" in out for out in failing), (
        "the pull request's A/B did not name the slower sgd:\n" + failing[-1][-4000:])
    torch_runs = [out for b, out in runs if "test_torch_train" in out]
    assert torch_runs and "aten::addmm" in torch_runs[-1]
    assert (project / "baselines" / "cpu-small.json").is_file()


@pytest.mark.parametrize("page", [PAGE, ROOT / "docs" / "ci.md"], ids=lambda p: p.name)
def test_the_workflows_of_the_pages_are_valid_and_pass_the_audit(page, tmp_path):
    workflows = [b for b in blocks(page.read_text("utf-8"))
                 if b.file and b.file.startswith(".github/workflows/")]
    assert workflows, f"{page.name} shows no workflow"
    for workflow in workflows:
        path = tmp_path / Path(workflow.file).name
        path.write_text(workflow.text, "utf-8")
        zizmor = str(Path(sys.executable).parent / "zizmor")  # a binary, in the test extra
        for command in ([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                         "vendor.github-workflows"], [zizmor, "--offline", "--no-progress"]):
            done = subprocess.run([*command, str(path)], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, f"{page.name}: {command}\n{done.stdout}{done.stderr}"

def test_the_readme_example_runs_in_an_empty_project(tmp_path):
    readme = (ROOT / "README.md").read_text("utf-8")
    files = [b for b in blocks(readme) if b.file]
    assert {b.file for b in files} == {"tests/test_train.py", "tests/test_ops.py"}
    for block in files:
        (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / block.file).write_text(block.text, "utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "--opperf", "-p", "no:cacheprovider",
                           "--benchmark-max-time=0.05"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tests/test_train.py::test_train" in done.stdout and "test_matmul" in done.stdout
    assert "work per step" in done.stdout and "gate: PASSED" in done.stdout
