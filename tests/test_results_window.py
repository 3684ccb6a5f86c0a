"""Reading a results file through a window: every document reads (or is refused) exactly as
when it is read whole, whatever the window's size and wherever its edges fall."""

import json

import pytest

from pytest_opperf.records import reader as results_reader
from pytest_opperf.records.reader import _Document, _Window, read_results
from pytest_opperf.results import ResultsError, dumps_results
from tests.opperf_factories import e2e_run, results


def _good() -> str:
    runs = [e2e_run(run_id=f"suite.py::test_{i}[é {i}]",
                    stats={"conv2d": [1.5 + i, 2.25e3], "relu": [0.125]})
            for i in range(4)]
    runs[1].notes.append("a note")
    return dumps_results(results(*runs))


def _many() -> str:
    """A run one of whose stats holds many samples: longer than the windows below."""
    run = e2e_run(run_id="suite.py::test_long", stats={"conv2d": [0.5 + (i % 97) / 8 for i in
                                                                  range(3000)], "relu": [1.0]})
    return dumps_results(results(e2e_run(), run, e2e_run(run_id="suite.py::test_last")))


GOOD = _good()
MANY = _many()
SAMPLES = MANY.index('"samples_ms": [') + len('"samples_ms": [')
HEAD, _, REST = GOOD.partition('"runs": [\n')
FIRST_RUN = REST.split("\n")[0]

DOCUMENTS = {
    "good": GOOD,
    "good, members after runs": GOOD.replace('"schema": "opperf/1", ', "")[:-2]
                                + ', "schema": "opperf/1"}\n',
    "good, no runs": HEAD + '"runs": []}\n',
    "good, spaces everywhere": GOOD.replace(", ", " ,   \n\t ").replace(": ", "  :  "),
    "good, a number last": GOOD[:-2] + ', "zz": 12345678901234}',
    "a key twice at the top": GOOD[:-2] + ', "created": "x"}\n',
    "a key twice in a run": GOOD.replace('"kind": "e2e"', '"kind": "e2e", "kind": "op"', 1),
    "NaN in a run": GOOD.replace('"wall_s": ', '"wall_s": NaN, "x": ', 1),
    "a bad run": GOOD.replace('"kind": "e2e"', '"kind": "nope"', 1),
    "a bad run before the schema": GOOD.replace('"schema": "opperf/1", ', "")
                                       .replace('"kind": "e2e"', '"kind": "nope"', 1)[:-2]
                                   + ', "schema": "opperf/1"}\n',
    "another schema": GOOD.replace("opperf/1", "opperf/9"),
    "cut short": GOOD[: len(GOOD) // 2],
    "cut inside a number": GOOD[: GOOD.index("2250.0") + 3],
    "extra data": GOOD + "{}",
    "no comma between runs": GOOD.replace("},\n{", "}\n{", 1),
    "not an object": "[" + FIRST_RUN + "]",
    "empty": "",
    "runs not a list": HEAD + '"runs": 3}\n',
    "runs missing": HEAD[:-2] + "}\n",
    "good, a stat of many samples": MANY,
    "good, many samples spaced": MANY[:SAMPLES] + MANY[SAMPLES:].replace(", ", " ,\n ", 2000),
    "good, many samples, integers and exponents": MANY[:SAMPLES] + "7, 0, 1e-05, 2.5E+2, 0e0, 10, "
                                                  + MANY[SAMPLES:],
    "good, many samples, minus zeros": MANY[:SAMPLES] + "-0, -0.0, " + MANY[SAMPLES:],
    "many samples, a leading zero": MANY[:SAMPLES] + "01, " + MANY[SAMPLES:],
    "many samples, a plus": MANY[:SAMPLES] + "+1, " + MANY[SAMPLES:],
    "many samples, no digit before the point": MANY[:SAMPLES] + ".5, " + MANY[SAMPLES:],
    "many samples, two numbers in one item": MANY[:SAMPLES] + "1 2, " + MANY[SAMPLES:],
    "many samples, an empty item": MANY[:SAMPLES] + "1,, " + MANY[SAMPLES:],
    "many samples, a nested list": MANY[:SAMPLES] + "[1], " + MANY[SAMPLES:],
    "many samples, a null": MANY[:SAMPLES] + MANY[SAMPLES:].replace(", ", ", null, ", 1500)
                            .replace(", null, ", ", ", 1499),
    "many samples, a string": MANY[:SAMPLES] + '"1", ' + MANY[SAMPLES:],
    "many samples, NaN": MANY[:SAMPLES] + "NaN, " + MANY[SAMPLES:],
    "many samples, a negative": MANY[:SAMPLES] + "-1.5, " + MANY[SAMPLES:],
    "many samples, a trailing comma": MANY.replace("]", ",]", MANY.count("]", 0, SAMPLES) + 1)
                                          .replace(",]", "]", MANY.count("]", 0, SAMPLES)),
    "many samples, a key twice in the stat": MANY.replace('"samples_ms"', '"count": 1, '
                                                          '"samples_ms"', 1),
    "many samples, cut inside them": MANY[:SAMPLES + 5000],
}


def _outcome(read):
    try:
        return read().to_dict()
    except ResultsError as exc:
        return f"refused: {exc}"


@pytest.mark.parametrize("window", [1, 2, 7, 64, 3000, 1 << 22])
@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_window_of_any_size_reads_as_the_whole_document_does(tmp_path, monkeypatch, name,
                                                               window):
    text = DOCUMENTS[name]
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    whole = _outcome(lambda: _Document(text, str(path)).read())
    monkeypatch.setattr(_Window, "WINDOW", window)
    assert _outcome(lambda: read_results(path)) == whole
    assert isinstance(whole, dict) == name.startswith("good"), whole


def test_a_good_file_larger_than_the_window_is_never_held_whole(tmp_path, monkeypatch):
    """The point of the window: the file's text is not read at once (it took 150 MB of a
    `compare` that peaked at 1.1 GB)."""
    path = tmp_path / "r.json"
    path.write_text(GOOD, encoding="utf-8")
    monkeypatch.setattr(_Window, "WINDOW", 64)
    longest = 0
    real_more = _Window.more

    def more(self, chars):
        nonlocal longest
        grew = real_more(self, chars)
        longest = max(longest, len(self.text))
        return grew

    monkeypatch.setattr(_Window, "more", more)
    monkeypatch.setattr(results_reader, "read_text", lambda *a: pytest.fail("read whole"))
    back = read_results(path)
    assert [r.id for r in back.runs] == [f"suite.py::test_{i}[é {i}]" for i in range(4)]
    assert longest < len(GOOD) / 2, (longest, len(GOOD))


def test_a_file_the_window_refuses_is_named_with_its_line(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text(DOCUMENTS["a key twice in a run"], encoding="utf-8")
    monkeypatch.setattr(_Window, "WINDOW", 16)
    with pytest.raises(ResultsError, match=r"the key 'kind' appears twice in runs\[0\] at "
                                           r"line 2 column \d+"):
        read_results(path)


def test_bytes_that_are_not_utf8_past_the_window_are_one_line(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_bytes(GOOD.encode()[:-40] + b"\xff\xfe" + GOOD.encode()[-38:])
    monkeypatch.setattr(_Window, "WINDOW", 32)
    with pytest.raises(ResultsError, match="cannot read: 'utf-8' codec can't decode"):
        read_results(path)


def test_the_documents_above_are_what_they_say():
    """The table's good documents are good JSON; the bad ones differ from GOOD."""
    for name, text in DOCUMENTS.items():
        if name.startswith("good"):
            json.loads(text)
        else:
            assert text != GOOD, name


def test_a_stat_of_many_samples_never_exists_as_a_list(tmp_path, monkeypatch):
    """A stat of millions of samples (22 million took a `compare` of two such files to 2.47
    GB, six times their size): the run is read member by member, its samples packed a part of
    the window at a time. Peak Python memory stays near the file's size (a list of floats
    takes 32 bytes a sample and the text about 8, where the packed samples take 8)."""
    import tracemalloc

    run = e2e_run(run_id="suite.py::test_long", step_ms=[], wall_s=1.0,
                  stats={"conv2d": [0.5 + (i % 997) / 1000 for i in range(300_000)]})
    path = tmp_path / "r.json"
    path.write_text(dumps_results(results(run)), encoding="utf-8")
    size = path.stat().st_size
    monkeypatch.setattr(_Window, "WINDOW", 1 << 16)
    monkeypatch.setattr(results_reader, "read_text", lambda *a: pytest.fail("read whole"))
    tracemalloc.start()
    try:
        back = read_results(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (stat,) = back.runs[0].stats
    assert len(stat.samples_ms) == 300_000 and stat.samples_ms[996] == 1.496
    assert peak < 1.5 * size, (peak, size)


@pytest.mark.parametrize("window", [1, 2, 7, 64, 3000])
@pytest.mark.parametrize("name", ["good, a stat of many samples", "good, many samples spaced",
                                  "good, many samples, integers and exponents"])
def test_a_run_larger_than_the_window_is_streamed_wherever_the_edges_fall(tmp_path, monkeypatch,
                                                                          name, window):
    """Never read whole, even where the window's edge cuts a number of the run (``0.`` of
    ``0.5`` reads as a number: the window reads on until a character no number goes on with)."""
    path = tmp_path / "r.json"
    path.write_text(DOCUMENTS[name], encoding="utf-8")
    whole = _Document(DOCUMENTS[name], str(path)).read().to_dict()
    monkeypatch.setattr(_Window, "WINDOW", window)
    monkeypatch.setattr(results_reader, "read_text", lambda *a: pytest.fail("read whole"))
    assert read_results(path).to_dict() == whole
