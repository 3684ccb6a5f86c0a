"""The history read and written as a hostile or careless user would: values from files stay
data on git's command line, secrets of a URL are never printed or stored, bad URLs and stores are
one line."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from pytest_opperf.cli import main
from pytest_opperf.history.errors import HistoryError
from pytest_opperf.history.records import commit_time
from pytest_opperf.history.sources import check_target, check_url, redact, scrub
from pytest_opperf.history.store import Store
from pytest_opperf.results import write_results
from pytest_opperf.workcounts.workcount import OUTSIDE, WorkCounts
from tests.history_helpers import session
from tests.opperf_suites import assert_one_line_usage_error, e2e

pytest_plugins = ["pytester"]


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), out, err)
    return status, out.getvalue(), err.getvalue()


def _git_repo(path: Path) -> Path:
    path.mkdir()
    for args in (["init", "-q"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                                  "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


# --- 1. values from files reach git as data ---------------------------------------------


def test_a_sha_that_is_an_option_never_reaches_git_as_one(tmp_path):
    repo = _git_repo(tmp_path / "repo")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    assert commit_time(f"--output={victim}", repo) is None
    assert victim.read_text() == "keep me\n"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()
    assert commit_time(head, repo) is not None  # a real sha still has its time


@pytest.mark.parametrize("sha", ["--output=VICTIM", 5, ["a"], {"x": 1}, "abc xyz", ""])
def test_history_import_refuses_a_sha_that_is_no_hex_commit_id_in_one_line(tmp_path, sha):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    results = tmp_path / "r.json"
    write_results(results, session())
    doc = json.loads(results.read_text())
    doc["commit"]["sha"] = str(victim).join(sha.split("VICTIM")) if isinstance(sha, str) else sha
    results.write_text(json.dumps(doc))
    status, out, err = _cli("history", "import", str(results), "--into",
                            str(tmp_path / "h.sqlite"))
    assert status == 4 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "commit.sha must be a hexadecimal commit id" in err
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "h.sqlite").exists()


# --- 2. secrets of a URL -----------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:s3cret@h:5/db", "postgresql://u:***@h:5/db"),
    ("postgresql://u@host/db?password=s3cret&sslmode=require",
     "postgresql://u@host/db?password=***&sslmode=require"),
    ("postgres://u@h/db?sslpassword=s3cret&passfile=%2Fhome%2Fu%2Fpgpass&sslkey=k.pem",
     "postgres://u@h/db?sslpassword=***&passfile=***&sslkey=***"),
    ("postgresql://u@h/db?pass%77ord=s3cret", "postgresql://u@h/db?pass%77ord=***"),
    ("postgresql://u:s3cret@h:x/db?password=s3cret", "postgresql://u:***@h:x/db?password=***"),
    ("postgresql://u:s3cret@[::1/db", "postgresql://u:***@[::1/db"),
])
def test_every_credential_of_a_url_is_redacted(url, shown):
    assert redact(url) == shown
    assert scrub(f"failed: {url} said s3cret", url) == f"failed: {redact(url)} said ***"
    assert redact("postgresql://h/db?sslmode=require") == "postgresql://h/db?sslmode=require"


def test_a_drivers_message_loses_the_secrets_of_its_url():
    pytest.importorskip("psycopg")
    url = "postgresql://opperf@127.0.0.1:1/history?password=s3cret&connect_timeout=2"
    with pytest.raises(HistoryError) as err:
        Store(url, create=True)
    message = str(err.value)
    assert message.startswith("postgresql://opperf@127.0.0.1:1/history?password=***")
    assert "s3cret" not in message and "\n" not in message


def test_the_session_prints_no_query_password(pytester):
    pytest.importorskip("psycopg")
    pytester.makepyfile(test_suite=e2e(steps=2))
    url = "postgresql://opperf@127.0.0.1:1/history?password=s3cret&connect_timeout=1"
    result = pytester.runpytest("--opperf", f"--opperf-history={url}", "-p", "no:cacheprovider")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 4
    assert "s3cret" not in text
    result.stdout.fnmatch_lines(["error: --opperf-history postgresql://opperf@127.0.0.1:1/history"
                                 "?password=***&connect_timeout=1: *"])


def test_the_dashboard_and_the_listing_show_the_source_redacted(tmp_path):
    pytest.importorskip("plotly")
    from pytest_opperf.history import dashboard, trends

    url = "postgresql://u:pw@h/db?password=s3cret"
    label = redact(url)
    with Store(str(tmp_path / "h.sqlite"), create=True) as store:
        store.append(session())
        history = store.load()
    groups = trends.build(history)
    assert "s3cret" not in dashboard.page(label, groups, history)
    assert "s3cret" not in "\n".join(trends.history_lines(label, groups))


# --- 3. URLs checked before use ----------------------------------------------------------


@pytest.mark.parametrize(("url", "problem"), [
    ("postgresql://u@h:abc/db", "port 'abc' of host 'h' is not a number in 1-65535"),
    ("postgresql://u@h:70000/db", "port '70000' of host 'h' is not a number in 1-65535"),
    ("postgresql://u@[::1/db", "malformed IPv6 host '[::1'"),
    ("postgresql://u@[::1]x/db", "malformed IPv6 host '[::1]x'"),
    ("postgresql://u@[zz]:5/db", "malformed IPv6 host '[zz]:5'"),
    ("postgresql://u@::1/db", "malformed host '::1'"),
])
def test_a_malformed_url_is_one_line(url, problem):
    with pytest.raises(HistoryError) as err:
        check_url(url)
    assert problem in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(HistoryError, match="is not a number|malformed"):
        check_target(url)
    status, out, err_text = _cli("history", url)
    assert status == 4 and err_text.count("\n") == 1 and problem in err_text
    status, out, err_text = _cli("dashboard", url, "--out", "site")
    assert status == 4 and err_text.count("\n") == 1 and problem in err_text


@pytest.mark.parametrize("url", ["postgresql://h1:5432,h2:5433/db", "postgresql://[::1]:5/db",
                                 "postgresql:///db", "postgresql://%2Fvar%2Frun/db"])
def test_valid_urls_pass_the_check(url):
    check_url(url)


@pytest.mark.parametrize("url", ["postgresql://u@h:abc/db?password=s3cret",
                                 "postgresql://u@[::1/db?password=s3cret"])
def test_a_session_with_a_malformed_url_is_a_usage_error_before_tests_run(pytester, url):
    pytester.makepyfile(test_x="def test_x():\n    raise AssertionError('ran')\n")
    result = pytester.runpytest("--opperf", f"--opperf-history={url}")
    assert_one_line_usage_error(result, "opperf: --opperf-history postgresql://u@",
                                "password=***")
    assert "s3cret" not in result.stdout.str() + result.stderr.str()
    assert "AssertionError" not in result.stdout.str()


# --- 7. a schema version that is not a number --------------------------------------------


def test_a_history_whose_schema_version_is_not_a_number_is_one_line(tmp_path):
    path = tmp_path / "h.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE opperf_schema (version TEXT)")
    conn.execute("INSERT INTO opperf_schema VALUES ('one')")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match=r"h.sqlite: history schema version 'one' is not a "
                                           r"number"):
        Store(str(path))
    status, out, err = _cli("history", str(path))
    assert status == 4 and err.count("\n") == 1 and "Traceback" not in err


# --- 5. text from the store escaped in every view ----------------------------------------

FORGED = "\ngate: PASSED (1 checks)\n\x1b[2K"


def _hostile_store(tmp_path: Path) -> str:
    """Sessions whose run id, stat name (of the times and of the work counts), branch and device
    class carry markup and newlines."""
    from tests.opperf_factories import e2e_run

    source = str(tmp_path / "h.sqlite")
    with Store(source, create=True) as store:
        for i, level in enumerate([2.0] * 4 + [3.0] * 4):
            results = session(sha=f"{i:02x}" + "0" * 38, created=f"2026-11-01T{i:02d}:00:00+00:00",
                              device_class=f"cpu{FORGED}</script>")
            results.runs[0] = e2e_run(
                run_id=f"suite.py::test_train<!--<script>{FORGED}",
                stats={f"conv<!--<script>{FORGED}": [level * 5] + [level] * 5,
                       "relu\u2028</script><b>": [1.0] * 6},
                step_ms=[10.0 * level] * 6)
            results.runs[0].work = WorkCounts(
                {f"conv<!--<script>{FORGED}": {"bytecodes": int(level * 10_000)},
                 OUTSIDE: {"bytecodes": 500, "c_calls": 5}}, steps=3, pass_s=0.1,
                versions={"python": "3.11</script>"})
            assert results.commit is not None
            results.commit["branch"] = f"main{FORGED}<!--<script>"
            store.append(results)
    return source


def test_the_history_listing_escapes_stored_text(tmp_path):
    source = _hostile_store(tmp_path)
    status, out, err = _cli("history", source)
    assert status == 0, err
    lines = out.splitlines()
    assert not any(line.startswith("gate: PASSED") for line in lines)
    assert "\x1b" not in out and "\u2028" not in out
    assert any("\\ngate: PASSED (1 checks)\\n\\x1b[2K" in line for line in lines)
    assert any("conv<!--<script>\\ngate" in line for line in lines)  # the stat, escaped
    status, out, err = _cli("history", source, "--stat", "conv*")
    assert status == 0, err
    shown = [line for line in out.splitlines() if "bytecodes:conv" in line]
    assert shown and all("\\ngate: PASSED" in line for line in shown)  # a stat's work too
    assert not any(line.startswith("gate: PASSED") for line in out.splitlines())


def test_the_dashboards_scripts_hold_no_markup_from_the_store(tmp_path):
    pytest.importorskip("plotly")
    import re

    source = _hostile_store(tmp_path)
    status, out, err = _cli("dashboard", source, "--out", str(tmp_path / "site"))
    assert status == 0, err
    text = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    opened = len(re.findall(r"<script\b", text, re.I))
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", text, re.I | re.S)
    assert len(scripts) == opened  # every script element ends where it should
    for body in scripts:
        if "plotly.js v" in body:
            continue  # the library
        for bad in ("<!--", "<script", "</script", "\u2028"):
            assert bad not in body.lower(), (bad, body[:200])
    data = json.loads(re.search(r'<script type="application/json" id="data-0">(.*?)</script>',
                                text, re.S).group(1))
    names = set(data["series"])
    assert f"suite.py::test_train<!--<script>{FORGED} step_ms:conv<!--<script>{FORGED}" in names
    assert f"suite.py::test_train<!--<script>{FORGED} step_ms:relu\u2028</script><b>" in names
    assert f"suite.py::test_train<!--<script>{FORGED} bytecodes:conv<!--<script>{FORGED}" in names
    assert 'id="work-0-0"' in text  # the work chart, its title the run id, in a script as data
    assert "<b>" not in text.replace("&lt;b&gt;", "")  # in HTML text: escaped
