"""Fitting the terminal report to a width: cut, wrap and list text, group run ids, fit tables.

The width is a parameter: the plugin passes pytest's terminal width (``COLUMNS`` when set).
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterable, Sequence

from tabulate import tabulate

__all__ = ["clean", "common_prefix", "fit", "listing", "md_code", "md_inert", "md_text",
           "middle",
           "run_group", "table", "wrap"]

_ELLIPSIS = "..."

# C0 controls (newline, ESC...), DEL and C1 controls, and the line and paragraph separators: a
# run id or stat name read from a file must not move the cursor, colour the terminal or start a
# new line (which could forge a "gate: PASSED" line in a job summary)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028",
                 0x2029: "\\u2029"})


def clean(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``)."""
    return str(text).translate(_CONTROL)


def md_text(text: str) -> str:
    """Text for a markdown line or table cell: control characters escaped, no
    HTML tags, no column breaks."""
    return clean(text).replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


_JOINER = "\u200d"  # zero width: shown as nothing, and it breaks what GitHub would make live
_MD_ESCAPED = {ord(c): "\\" + c for c in "\\`*_~"}
_LIVE = (
    re.compile(r"([@#])(?=\w)"),  # a mention (@octocat, @org/team), a reference (#123)
    re.compile(r"(?i)\b(gh-)(?=\d)"),  # a reference GH-123
    re.compile(r"(?i)\b((?:https?|ftp)(?=:)|www(?=\.))"),  # an autolinked address
)


def md_inert(text: str) -> str:
    """Text from a run id or a message for a markdown line or table cell that nothing in it can
    make live: :func:`md_text`'s escapes; the emphasis and code marks and the ``](`` of a link
    or an image escaped; an entity shown as written; a joiner after the ``@`` of a mention and
    the ``#`` of an issue reference, and before the ``:`` or ``.`` of an address (GitHub would
    notify, cross-reference or link them); a first character that would start a heading, a
    list, a task or a link definition escaped."""
    text = clean(text).replace("&", "&amp;").translate(_MD_ESCAPED)
    text = text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    text = text.replace("](", "\\](").replace("][", "\\][")  # a link or an image: none
    for pattern in _LIVE:
        text = pattern.sub(lambda m: m.group(1) + _JOINER, text)
    if text[:1] in ("#", "-", "+", "=", "["):  # "[x]: url" defines a link, "[ ]" a task
        text = "\\" + text
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", text)


def md_code(text: str) -> str:
    """``text`` as an inline code span, fenced by more backticks than it holds."""
    text = clean(text)
    ticks = 1
    while "`" * ticks in text:
        ticks += 1
    fence = "`" * ticks
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked."""
    return text if len(text) <= width else text[:max(0, width - len(_ELLIPSIS))] + _ELLIPSIS


def middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` by dropping its middle (both ends of an id say most)."""
    if len(text) <= width:
        return text
    keep = max(0, width - len(_ELLIPSIS))
    return text[:keep // 2] + _ELLIPSIS + text[len(text) - (keep - keep // 2):]


def wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text`` on lines of at most ``width``, continuation lines indented by ``indent``."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def listing(items: Sequence[str], limit: int = 5) -> str:
    """``items`` joined by commas, at most ``limit`` of them, then ``... and N more``."""
    more = f" ... and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def common_prefix(ids: Iterable[str]) -> str:
    """The longest prefix of all ``ids`` that ends at a ``/`` or ``::`` boundary ("" if none)."""
    ids = list(ids)
    prefix = os.path.commonprefix(ids)
    cut = max(prefix.rfind("/") + 1, prefix.rfind("::") + 2 if "::" in prefix else 0)
    prefix = prefix[:cut]
    return prefix if all(len(i) > len(prefix) for i in ids) else ""


def run_group(run_id: str) -> tuple[str, str]:
    """A run id as (group, rest): the group is a glob of the test
    (``suites/test_ops.py::test_op[*]``) or of the module (``suites/test_executor.py::*``);
    ``("", id)`` for an id with neither."""
    if "[" in run_id and run_id.endswith("]"):
        head, params = run_id[:-1].split("[", 1)
        return f"{head}[*]", params
    if "::" in run_id:
        module, test = run_id.rsplit("::", 1)
        return f"{module}::*", test
    return "", run_id


def table(rows: Sequence[Sequence[str]], headers: Sequence[str], colalign: Sequence[str],
          width: int, headings: Sequence[str] = (), droppable: Sequence[str] = ()) -> list[str]:
    """A plain tabulate table in at most ``width`` columns where the numbers allow it: a table
    too wide first drops the padding of its headers, then the ``droppable`` columns (the last
    named first; a line after the table names them), and only then gives a first-column cell
    too wide a line of its own (its middle cut to ``width`` if need be), its row's values on
    the next. ``headings[i]``: lines put before row ``i``."""
    heads, align = list(headers), list(colalign)
    cells = [list(r) for r in rows]
    dropped: list[str] = []

    def render(body: Sequence[Sequence[str]], pad: bool = True) -> list[str]:
        # tabulate pads headers by 2: a table too wide does without (its headers as a row)
        return tabulate(body if pad else [heads, *body], heads if pad else (),
                        tablefmt="plain", disable_numparse=True, preserve_whitespace=True,
                        colalign=align).splitlines()

    names = [r[0] for r in cells]
    lines = render(cells)
    pad = max(map(len, lines)) <= width
    lines = lines if pad else render(cells, pad)
    for name in reversed(droppable):
        if max(map(len, lines)) <= width or name not in heads:
            continue
        i = heads.index(name)
        del heads[i], align[i]
        for r in cells:
            del r[i]
        dropped.insert(0, name)
        lines = render(cells, pad)
    room = max(map(len, [heads[0], *names])) + width - max(map(len, lines))
    own = [len(n) > room for n in names]
    if any(own):
        lines = render([["" if o else r[0], *r[1:]] for r, o in zip(cells, own, strict=True)],
                       pad)
    out = lines[:1]
    for i, line in enumerate(lines[1:]):
        heading = headings[i].splitlines() if i < len(headings) else []
        out += heading + [middle(names[i], width)] * own[i] + [line.rstrip()]
    if dropped:
        out.append(fit(f"({', '.join(dropped)} left out to fit {width} columns)", width))
    return out
