"""--opperf-history: the session appended after the gate; bad targets found early; failures
exit 4."""

from __future__ import annotations

import pytest

from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build
from tests.history_helpers import pg_schema_url_fixture, store_source_fixture  # noqa: F401
from tests.opperf_suites import NO_TRACEBACK, assert_one_line_usage_error, e2e

pytest_plugins = ["pytester"]


def test_each_session_is_appended_with_its_verdict(pytester, store_source):
    pytester.makepyfile(test_suite=e2e(steps=3))
    for _ in range(2):
        result = pytester.runpytest(
            "--opperf", f"--opperf-history={store_source}", "-p", "no:cacheprovider"
        )
        assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["wrote history: * (session 2)"])
    with Store(store_source) as store:
        history = store.load()
    assert [s.gate_passed for s in history.sessions] == [True, True]
    assert [r.run for r in history.runs] == ["test_suite.py::test_train"] * 2
    names = {st.name for st in history.stats}
    assert {"ExecutorRunTimer", "conv2d", "relu", "conv2d/Im2ColTimer"} <= names
    conv = [st for st in history.stats if st.name == "conv2d"]
    assert all(
        st.step_count == 1 and 1.5 < st.value < 50 for st in conv
    )  # ~2 ms of sleeps per step


def test_a_failed_gate_is_stored_as_failed(pytester, tmp_path):
    pytester.makepyfile(test_suite=e2e(steps=3))
    pytester.makefile(".toml", limits='[[limit]]\nstat = "conv2d"\nmax_avg_ms = 0.001\n')
    result = pytester.runpytest(
        "--opperf", "--opperf-history=h.sqlite", "--opperf-thresholds=limits.toml"
    )
    assert result.ret == 1
    with Store(str(pytester.path / "h.sqlite")) as store:
        (stored,) = store.load().sessions
    assert stored.gate_passed is False


def test_the_ini_key_is_relative_to_the_ini_file(pytester, monkeypatch):
    ini = pytester.makeini("[pytest]\nopperf_history = out/h.sqlite\n")
    (pytester.path / "out").mkdir()
    suite = pytester.makepyfile(test_suite=e2e(steps=2))
    monkeypatch.chdir(pytester.mkdir("elsewhere"))  # not the ini file's directory
    result = pytester.runpytest("--opperf", "-c", str(ini), str(suite), "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    with Store(str(pytester.path / "out" / "h.sqlite")) as store:
        assert len(store.load().sessions) == 1


@pytest.mark.parametrize("target, fragment", [
    ("nowhere/h.sqlite", "--opperf-history nowhere/h.sqlite: /"),
    (".", "is a directory, expected a SQLite file"),
    ("mysql://db/h", "expected a path (SQLite) or a postgresql:// URL, got scheme 'mysql'"),
])
def test_bad_targets_are_usage_errors_before_tests_run(pytester, target, fragment):
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", f"--opperf-history={target}")
    assert_one_line_usage_error(result, fragment)
    if target.startswith("nowhere"):
        assert_one_line_usage_error(
            result, "/nowhere/h.sqlite: directory ", "/nowhere does not exist"
        )
    assert "passed" not in result.stdout.str()


def test_an_unreachable_server_is_one_line_exit_4_and_the_other_files_are_written(pytester):
    pytest.importorskip("psycopg")
    pytester.makepyfile(test_suite=e2e(steps=2))
    url = "postgresql://opperf:secret@127.0.0.1:1/h?connect_timeout=2"
    result = pytester.runpytest("--opperf", f"--opperf-history={url}", "--opperf-json=r.json")
    assert result.ret == 4
    text = result.stdout.str()
    for marker in NO_TRACEBACK:
        assert marker not in text
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert (
        len(errors) == 1
        and "postgresql://opperf:***@127.0.0.1:1/h" in errors[0]
        and "refused" in errors[0]
    )
    assert "secret" not in text
    assert (pytester.path / "r.json").exists()
    result.stdout.fnmatch_lines(["wrote json: */r.json"])


def test_an_unusable_history_file_is_one_line_exit_4_and_the_other_files_are_written(pytester):
    """Found only at the end (an existing file that is not a database, like a locked one)."""
    (pytester.path / "h.sqlite").write_text("this is not a database " * 200)
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-history=h.sqlite", "--opperf-markdown=r.md")
    assert result.ret == 4
    result.stdout.fnmatch_lines(
        ["error: --opperf-history h.sqlite: *h.sqlite: file is not a database"]
    )
    assert (pytester.path / "r.md").exists()


def test_an_interrupted_session_appends_nothing(pytester):
    pytester.makepyfile(
        test_suite=e2e(steps=2) + "\n\ndef test_stop():\n    raise KeyboardInterrupt\n"
    )
    result = pytester.runpytest("--opperf", "--opperf-history=h.sqlite", no_reraise_ctrlc=True)
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        ["note: --opperf-history h.sqlite: not appended, the session was interrupted"]
    )
    assert not (pytester.path / "h.sqlite").exists()



def test_a_session_where_no_test_ran_appends_nothing(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    result = pytester.runpytest("--opperf", "--opperf-history=h.sqlite",
                                "--opperf-baseline=base.json", "--opperf-json=r.json",
                                "-k", "no_such_test")
    out = result.stdout.str()
    assert result.ret == 5, out  # pytest's "no tests collected": the gate adds nothing to it
    result.stdout.fnmatch_lines(["opperf: no test ran (no test selected): the opperf gate did not "
                                 "run and no file was written"])
    assert not any(line.startswith("gate:") or (line.startswith("=") and "opperf" in line)
                   for line in out.splitlines()), out  # no opperf section, no verdict
    assert not (pytester.path / "h.sqlite").exists() and not (pytester.path / "r.json").exists()


def test_a_session_whose_tests_all_skipped_is_gated_and_appended(pytester):
    """Selected tests that all skip (no GPU, a missing library) did run: the gate says that the
    baseline's runs are missing, and the history keeps the failed session."""
    pytester.makepyfile(test_suite=e2e(steps=2))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    skipped = e2e(steps=2) + '\npytestmark = __import__("pytest").mark.skip(reason="no GPU")\n'
    pytester.makepyfile(test_suite=skipped)
    result = pytester.runpytest("--opperf", "--opperf-history=h.sqlite",
                                "--opperf-baseline=base.json")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["FAIL (session) baseline_match",
                                 "*the session measured no runs*"])
    with Store(str(pytester.path / "h.sqlite")) as store:
        (stored,) = store.load().sessions
    assert stored.gate_passed is False


def test_a_non_utf8_locale_and_a_non_ascii_file_name_lose_no_file(pytester, monkeypatch):
    """Under LC_ALL=C (file-system encoding ascii) the node id of ``test_é.py`` holds surrogate
    escapes, which no UTF-8 writer takes: the history append was an INTERNALERROR and the
    markdown file was lost. The name is written as the UTF-8 it was on disk."""
    pytester.makepyfile(**{"test_\u00e9": e2e(steps=3)})
    for name, value in {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
                        "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": "ascii"}.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess(
        "--opperf", "--opperf-history=h.sqlite", "--opperf-markdown=r.md", "--opperf-json=r.json",
        "-p", "no:cacheprovider")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    assert "INTERNALERROR" not in text and "error:" not in text
    result.stdout.fnmatch_lines(["wrote markdown: *r.md", "wrote history: *h.sqlite (session 1)"])
    assert "### `test_\u00e9.py::test_train`" in (pytester.path / "r.md").read_text("utf-8")
    with Store(str(pytester.path / "h.sqlite")) as store:
        assert [r.run for r in store.load().runs] == ["test_\u00e9.py::test_train"]


def test_a_runs_work_counts_are_appended_and_listed(pytester, tmp_path):
    suite = e2e(steps=3) + "    run.counting_pass(train_step)\n"  # after the window
    pytester.makepyfile(test_suite=suite)
    source = str(tmp_path / "h.sqlite")
    for _ in range(2):
        result = pytester.runpytest("--opperf", f"--opperf-history={source}",
                                    "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str()
    with Store(source) as store:
        history = store.load()
    first, second = (r.work for r in history.runs)
    assert first is not None and second is not None
    assert {"conv2d", "relu", "(outside)"} <= set(first.stats) and first.steps == 2
    assert first.total("bytecodes") > 0 and first.stats == second.stats  # the same work
    (group,) = build(history)
    bytecodes = next(s for s in group.series if s.metric == "bytecodes")
    assert bytecodes.values == [first.total("bytecodes")] * 2  # two points: no git, two sessions
