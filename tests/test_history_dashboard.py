"""The dashboard: a self-contained page, opened in a real headless Chromium.

The browser test needs Debian's ``chromium`` and ``chromium-driver``
(``.ci/run`` installs them); it skips, saying so, only where they are not
installed. It keeps a screenshot in ``.opperf/test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from pytest_opperf.cli import main
from pytest_opperf.history.dashboard import work_traces
from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build
from tests.history_helpers import session, work

ARTIFACTS = Path(__file__).resolve().parent.parent / ".opperf" / "test-artifacts"
LEVELS = [2.0] * 8 + [2.6] * 4  # conv2d ms per step: a step at the 9th commit
OP_MS = [0.5 + 0.01 * i for i in range(len(LEVELS))]
# conv2d's self bytecodes per step: up at the 9th commit with its time; the step's total adds
# relu's 20,000 and 8,000 outside. The first two sessions have no work counts.
CONV_BYTECODES = [50_000] * 8 + [56_000] * 4
WORK_FROM = 2
BYTECODES = [n + 28_000 for n in CONV_BYTECODES][WORK_FROM:]
INSTRUCTIONS = [3_000_000 + 1_000 * i for i in range(len(LEVELS))][WORK_FROM:]
COMPARE = {
    "summary": "1 regressed, 150 unchanged",
    "metrics": [{"run": "suite.py::test_train", "ratio": 1.3}],
}


def _sha(i: int) -> str:
    return f"{i:02x}" + "0" * 38


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard")
    source = str(root / "h.sqlite")
    with Store(source, create=True) as store:
        for i, (level, op) in enumerate(zip(LEVELS, OP_MS, strict=True)):
            counted = None
            if i >= WORK_FROM:
                counted = work(bytecodes=CONV_BYTECODES[i],
                               instructions=INSTRUCTIONS[i - WORK_FROM])
            store.append(
                session(
                    conv_ms=level, op_ms=op, sha=_sha(i), created=f"2026-11-01T{i:02d}:00:00+00:00",
                    work_counts=counted,
                ),
                COMPARE if i == len(LEVELS) - 1 else None,
            )
    out = io.StringIO()
    assert main(["dashboard", source, "--out", str(root / "site")], out, io.StringIO()) == 0
    page = root / "site" / "index.html"
    assert out.getvalue().startswith(f"wrote dashboard: {page} (")
    return page


def _figure_data(text: str, div_id: str) -> dict[str, dict]:
    """The traces a chart of the page is drawn with (name -> trace), as plotly.js gets them."""
    start = re.search(rf'Plotly\.newPlot\(\s*"{re.escape(div_id)}",\s*', text).end()
    traces, _ = json.JSONDecoder().raw_decode(text, start)
    return {t["name"]: t for t in traces}


def test_the_work_chart_holds_each_work_count_per_step(site):
    with Store(str(site.parent.parent / "h.sqlite")) as store:
        (group,) = build(store.load())
    labels = [_sha(i)[:8] for i in range(WORK_FROM, len(LEVELS))]
    traces = dict(work_traces(group, "suite.py::test_train"))
    assert list(traces) == ["bytecodes", "Python calls", "C calls", "CPU instructions"]
    assert traces["bytecodes"]["x"] == labels and traces["bytecodes"]["y"] == BYTECODES
    assert traces["bytecodes"]["cp_x"] == [_sha(8)[:8]] and traces["bytecodes"]["cp_y"] == [84_000]
    assert traces["Python calls"]["y"] == [1_750] * len(labels)
    assert traces["C calls"]["y"] == [960] * len(labels)
    assert traces["CPU instructions"]["y"] == INSTRUCTIONS
    assert work_traces(group, "suite.py::test_op[conv2d]") == []  # a run without work counts

    text = site.read_text(encoding="utf-8")
    drawn = _figure_data(text, "work-0-0")
    assert drawn["bytecodes"]["y"] == BYTECODES and drawn["bytecodes"]["x"] == labels
    assert drawn["CPU instructions"]["y"] == INSTRUCTIONS
    assert drawn["bytecodes: change points"]["x"] == [_sha(8)[:8]]
    assert "work-0-1" not in text  # one e2e run, one work chart
    top = _figure_data(text, "top-0-0")
    assert set(top) == {"conv2d", "relu", "conv2d: change points"}  # times only


def test_the_page_is_self_contained(site):
    text = site.read_text(encoding="utf-8")
    assert not re.findall(
        r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=", text
    )  # nothing to fetch
    assert "Plotly.newPlot" in text and text.count("plotly.js v") >= 1  # plotly.js inline
    assert "1 regressed, 150 unchanged" in text  # the latest A/B result
    # searchable: step_ms conv2d, relu; call_ms conv2d; the work counts bytecodes, py_calls,
    # c_calls, instructions and bytecodes of conv2d, relu, (outside)
    assert text.count('<option value="') == 3 + 7
    assert '<option value="suite.py::test_train bytecodes:(outside)">' in text


def _browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(
            "Chromium is not installed (apt-get install chromium chromium-driver; .ci/run does): "
            "the dashboard's browser test needs it"
        )
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,2200"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def _errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _traces(browser, div_id: str) -> dict[str, dict]:
    return browser.execute_script(
        "var d = document.getElementById(arguments[0]); var out = {};"
        "d.data.forEach(function (t) { out[t.name] = {x: t.x, y: t.y}; }); return out;", div_id)


def test_the_charts_hold_the_stored_points_in_a_browser(site):
    browser = _browser()
    try:
        browser.get(site.as_uri())
        deadline = time.monotonic() + 30
        while (
            browser.execute_script("return document.querySelectorAll('.js-plotly-plot').length") < 6
        ):
            assert time.monotonic() < deadline, "the charts were not drawn"
            time.sleep(0.1)
        assert _errors(browser) == []
        labels = [_sha(i)[:8] for i in range(len(LEVELS))]

        eps = _traces(browser, "examples_per_sec-0")["suite.py::test_train"]
        assert eps["x"] == labels
        # 6 steps of 32 examples, each step 10 x conv2d ms of wall time
        assert eps["y"] == pytest.approx(
            [192 / (6 * 10 * level / 1e3) for level in LEVELS], rel=1e-4
        )  # 5 digits

        top = _traces(browser, "top-0-0")
        assert top["conv2d"]["y"] == pytest.approx(LEVELS) and top["relu"]["y"] == pytest.approx(
            [1.0] * 12
        )
        assert top["conv2d: change points"] == {"x": [labels[8]], "y": [2.6]}
        assert "relu: change points" not in top

        counted = _traces(browser, "work-0-0")
        assert counted["bytecodes"] == {"x": labels[WORK_FROM:], "y": BYTECODES}
        assert counted["CPU instructions"]["y"] == INSTRUCTIONS

        shares = _traces(browser, "shares-0")["suite.py::test_train"]
        assert {"conv2d", "relu", "Python", "framework overhead"} <= set(shares["y"])

        search = browser.find_element("id", "search-0")
        search.send_keys("suite.py::test_op[conv2d] call_ms:conv2d")
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", search)
        trend = _traces(browser, "trend-0")
        assert trend["suite.py::test_op[conv2d] call_ms:conv2d"]["y"] == pytest.approx(OP_MS)
        assert _errors(browser) == []

        browser.execute_script("console.error('probe')")  # the console check can see an error
        assert any("probe" in m for m in _errors(browser))

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        browser.execute_script("window.scrollTo(0, 0)")
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        browser.quit()
