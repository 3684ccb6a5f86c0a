"""python -m pytest_opperf compare|show: verdicts, exit codes, one-line errors."""

import io
import subprocess
import sys

import pytest

from pytest_opperf.cli import main
from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.thresholds import parse_thresholds
from pytest_opperf.results import write_results
from tests.opperf_factories import e2e_run, results
from tests.test_gate import noisy


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def files(tmp_path):
    base = tmp_path / "base.json"
    same = tmp_path / "same.json"
    slow = tmp_path / "slow.json"
    write_results(base, results(e2e_run(stats={"conv2d": noisy(2.0), "relu": noisy(1.0, seed=9)})))
    write_results(
        same, results(e2e_run(stats={"conv2d": noisy(2.0, seed=1), "relu": noisy(1.0, seed=8)}))
    )
    write_results(
        slow, results(e2e_run(stats={"conv2d": noisy(6.0, seed=2), "relu": noisy(1.0, seed=7)}))
    )
    return base, same, slow


def test_compare_passes_a_a(files):
    base, same, _ = files
    code, out, err = run_cli("compare", str(base), str(same))
    assert code == 0 and not err
    assert any(line.startswith("gate: PASSED (") for line in out.splitlines())
    assert "opperf gate" not in out
    assert "none beyond the regression rule" in out


def test_compare_shows_a_slower_stat_as_drift_and_passes(files, tmp_path):
    base, _, slow = files
    md = tmp_path / "report.md"
    code, out, _ = run_cli("compare", str(base), str(slow), "--markdown", str(md))
    assert code == 0, out
    assert "gate: PASSED" in out
    assert "--- drift against the baseline (advisory: time is gated in A/B only" in out
    assert "1 metric(s) beyond the regression rule" in out
    assert "step_ms:conv2d" in out.split("--- drift against the baseline")[1]
    text = md.read_text()
    assert "### Drift against the baseline" in text and "| step_ms:conv2d" in text


def test_compare_flags_a_slower_stat_with_time_gated(files, tmp_path):
    base, _, slow = files
    md = tmp_path / "report.md"
    t = tmp_path / "t.toml"
    t.write_text('[regression]\ntime = "gate"\n')
    code, out, _ = run_cli("compare", str(base), str(slow), "--markdown", str(md),
                           "--thresholds", str(t))
    assert code == 1
    assert "gate: FAILED (1 violation(s)" in out
    assert "opperf gate" in out
    assert "FAIL suite.py::test_train step_ms:conv2d\n     conv2d median per-step time" in out
    assert "Mann-Whitney U" in out
    assert md.read_text().splitlines()[2].startswith("**Gate: FAILED**")


def test_compare_applies_thresholds(files, tmp_path):
    base, same, _ = files
    t = tmp_path / "t.toml"
    t.write_text('[[limit]]\nstat = "conv2d"\nmax_avg_ms = 1.0\n')
    code, out, _ = run_cli("compare", str(base), str(same), "--thresholds", str(t))
    assert code == 1 and "avg_ms:conv2d" in out


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p.write_text("{broken"), "not valid JSON"),
        (
            lambda p: p.write_text('{"schema": "opperf/0", "runs": []}'),
            "unknown results schema 'opperf/0'",
        ),
        (lambda p: None, "no such file"),
    ],
)
def test_compare_unreadable_baseline_is_exit_4(files, tmp_path, setup, message):
    _, same, _ = files
    bad = tmp_path / "bad.json"
    setup(bad)
    code, out, err = run_cli("compare", str(bad), str(same))
    assert code == 4 and not out
    assert message in err and err.count("\n") == 1


def test_compare_bad_thresholds_is_exit_4(files, tmp_path):
    base, same, _ = files
    t = tmp_path / "t.toml"
    t.write_text("[regression]\nmax_slowdwn = 0.1\n")
    code, _, err = run_cli("compare", str(base), str(same), "--thresholds", str(t))
    assert code == 4 and "unknown key 'max_slowdwn' in [regression]" in err and err.count("\n") == 1


def test_bad_arguments_are_exit_4():
    code, _, err = run_cli("compare", "only-one.json")
    assert code == 4 and "required" in err and err.count("\n") == 1
    assert run_cli("frobnicate")[0] == 4
    assert run_cli()[0] == 4


def test_show_prints_the_report_and_stored_verdict(files, tmp_path):
    base, _, slow = files
    rs = results(e2e_run(stats={"conv2d": noisy(6.0, seed=2)}))
    from pytest_opperf.records.reader import read_results

    gated = parse_thresholds({"regression": {"time": "gate"}})
    rs.gate = evaluate(rs, gated, read_results(base), str(base)).to_dict()
    path = tmp_path / "r.json"
    write_results(path, rs)
    code, out, _ = run_cli("show", str(path))
    assert code == 0
    lines = out.splitlines()
    assert "suite.py::test_train  device=cpu timing=host" in lines
    assert any(line.startswith("Total examples: 640, total time: 0.20000 sec") for line in lines)
    assert any(line.startswith("gate: FAILED") for line in lines)
    assert any(line.startswith("FAIL suite.py::test_train step_ms:conv2d") for line in lines)


def test_module_entry_point(files):
    base, same, _ = files
    done = subprocess.run([sys.executable, "-m", "pytest_opperf", "compare", str(base), str(same)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "gate: PASSED" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "pytest_opperf", "show", str(base) + ".missing"],
                         capture_output=True, text=True)
    assert bad.returncode == 4 and "Traceback" not in bad.stderr and "no such file" in bad.stderr


def test_a_closed_pipe_ends_show_quietly_with_exit_0(tmp_path):
    """As `show R.json | head -1`: the reader closes the pipe after a line of an output far larger
    than a pipe's buffer; no `error: [Errno 32] Broken pipe`, no message from the exit flush."""
    path = tmp_path / "big.json"
    write_results(path, results(e2e_run(stats={f"op_{i:05d}_" + "x" * 60: [1.0, 1.0]
                                               for i in range(3000)})))
    proc = subprocess.Popen([sys.executable, "-m", "pytest_opperf", "show", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={
                                **__import__("os").environ, "COLUMNS": "200"})
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first and err == ""


@pytest.mark.parametrize("command", ["show", "history"])
def test_non_ascii_ids_print_escaped_under_the_c_locale(tmp_path, command):
    path = tmp_path / "r.json"
    write_results(path, results(e2e_run(run_id="suite/test_é.py::test_train",
                                        stats={"conv2d_ü": [1.0, 1.0]})))
    env = {**__import__("os").environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    target = str(path)
    if command == "history":
        target = str(tmp_path / "h.sqlite")
        done = subprocess.run([sys.executable, "-m", "pytest_opperf", "history", "import",
                               str(path), "--into", target], capture_output=True, env=env)
        assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "pytest_opperf", command, target],
                          capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"test_\\xe9.py" in done.stdout and b"Traceback" not in done.stderr
