"""The dashboard: a self-contained page, opened in a real headless Chromium.

The browser test needs Debian's ``chromium`` and ``chromium-driver``
(``.ci/run`` installs them); it skips, saying so, only where they are not
installed. It keeps a screenshot in ``.opperf/test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import io
import re
import shutil
import time
from pathlib import Path

import pytest

from pytest_opperf.cli import main
from pytest_opperf.history.store import Store
from tests.history_helpers import session

ARTIFACTS = Path(__file__).resolve().parent.parent / ".opperf" / "test-artifacts"
LEVELS = [2.0] * 8 + [2.6] * 4  # conv2d ms per step: a step at the 9th commit
OP_MS = [0.5 + 0.01 * i for i in range(len(LEVELS))]
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
            store.append(
                session(
                    conv_ms=level, op_ms=op, sha=_sha(i), created=f"2026-11-01T{i:02d}:00:00+00:00"
                ),
                COMPARE if i == len(LEVELS) - 1 else None,
            )
    out = io.StringIO()
    assert main(["dashboard", source, "--out", str(root / "site")], out, io.StringIO()) == 0
    page = root / "site" / "index.html"
    assert out.getvalue().startswith(f"wrote dashboard: {page} (")
    return page


def test_the_page_is_self_contained(site):
    text = site.read_text(encoding="utf-8")
    assert not re.findall(
        r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=", text
    )  # nothing to fetch
    assert "Plotly.newPlot" in text and text.count("plotly.js v") >= 1  # plotly.js inline
    assert "1 regressed, 150 unchanged" in text  # the latest A/B result
    assert text.count('<option value="') == 3  # searchable: step_ms conv2d, relu; call_ms conv2d


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
            browser.execute_script("return document.querySelectorAll('.js-plotly-plot').length") < 5
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
