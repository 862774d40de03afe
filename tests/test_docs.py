"""The design lives in the repo: nothing points outside it, and docs/design.md's examples are real.

The reference check scans every text file under README.md, pyproject.toml, docs, algorithms, sim,
runners, tests and benchmarks for the old contract's name and for the sibling ``shared`` folder, with no
exception: the data the tests read is in the repository (tests/data). The folders copied there verbatim
(tests/data/published, tests/data/foreign) are not scanned: they are others' files, kept as written. The example
check takes the two ``json`` fenced blocks of docs/design.md, loads them with the real loaders,
verifies the schedule and simulates it on the topology against a closed form worked by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from algorithms import formats as fileformat
from algorithms.ir import Kind
from sim import topology
from sim.engine.reference import simulate
from sim.verify.verifier import verify

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("README.md", "pyproject.toml", "docs", "algorithms", "sim", "runners", "tests", "benchmarks")
# Built from pieces so that this file does not match itself.
FORBIDDEN = ("DESIGN" + ".md", "shared" + "/")
COPIES = (ROOT / "tests" / "data" / "published", ROOT / "tests" / "data" / "foreign")  # others' files, verbatim
DESIGN = ROOT / "docs" / "design.md"


def _text_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
                         and not any(copy in p.parents for copy in COPIES))
    return files


def outside_references(files: list[Path], root: Path = ROOT) -> list[str]:
    """``path:line: text`` for every line naming the old contract or the shared folder."""
    found: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files (images, compiled data) hold no reference a reader would follow
        for number, line in enumerate(text.splitlines(), 1):
            if any(word in line for word in FORBIDDEN):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_nothing_refers_outside_the_repo() -> None:
    files = _text_files()
    assert len(files) > 50, f"only {len(files)} files scanned: is {ROOT} the repository?"
    assert outside_references(files) == []


def test_the_reference_check_catches_a_bad_reference(tmp_path: Path) -> None:
    # The scanner on files made here: the old contract and the sibling corpus are found, tests/data is not.
    bad = tmp_path / "bad.py"
    bad.write_text('"""See the contract in ../' + FORBIDDEN[1] + FORBIDDEN[0] + '."""\n', encoding="utf-8")
    corpus = tmp_path / "corpus.py"
    corpus.write_text('CORPUS = "../' + FORBIDDEN[1] + 'foreign/msccl"\n', encoding="utf-8")
    good = tmp_path / "good.py"
    good.write_text('CORPUS = ROOT / "tests/data/foreign/msccl"\n', encoding="utf-8")
    found = outside_references([bad, corpus, good], tmp_path)
    assert [f.split(":")[0] for f in found] == ["bad.py", "corpus.py"], found
    # The verbatim copies are left out of the scan, and only they: this file and the refresh script are in it.
    files = _text_files()
    assert not any(copy in p.parents for p in files for copy in COPIES)
    assert Path(__file__).resolve() in files and ROOT / "tests" / "data" / "refresh.py" in files


# A citation: the design's path, then a comma or an opening parenthesis, then the heading in double quotes
# (line breaks and comment markers in between are rejoined first).
_CITATION = re.compile(r'docs/design\.md(?:,|\s*\()\s*"([^"]+)"')


def cited_sections(files: list[Path], root: Path = ROOT) -> list[tuple[str, str]]:
    """``(path, section)`` for every quoted section name cited after docs/design.md."""
    cited: list[tuple[str, str]] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)  # rejoin names wrapped over lines (and comment lines)
        cited.extend((str(path.relative_to(root)), name) for name in _CITATION.findall(text))
    return cited


def test_cited_sections_of_the_design_exist() -> None:
    headings = {h.strip().lower() for h in re.findall(r"^#+ (.+)$", DESIGN.read_text(encoding="utf-8"), flags=re.M)}
    cited = cited_sections(_text_files())
    assert len(cited) >= 5, cited  # the docstrings that cite sections are found at all
    missing = [f"{path}: {name!r}" for path, name in cited if name.lower() not in headings]
    assert missing == [], f"sections cited but not headings of docs/design.md: {missing}"


def _json_examples() -> dict[str, str]:
    """The ``json`` fenced blocks of docs/design.md, keyed by their ``format``."""
    blocks = re.findall(r"^```json\n(.*?)^```", DESIGN.read_text(encoding="utf-8"), flags=re.S | re.M)
    examples: dict[str, str] = {}
    for block in blocks:
        doc = json.loads(block)
        if isinstance(doc, dict) and isinstance(doc.get("format"), str):
            assert doc["format"] not in examples, f"two json examples of {doc['format']} in docs/design.md"
            examples[doc["format"]] = block
    missing = {fileformat.FORMAT, topology.FORMAT} - set(examples)
    assert not missing, f"docs/design.md has no json example of {sorted(missing)}"
    return examples


def test_the_schedule_example_loads_and_verifies() -> None:
    schedule = fileformat.loads(_json_examples()[fileformat.FORMAT])
    assert schedule.collective.kind is Kind.ALLREDUCE
    assert (schedule.ranks, schedule.collective.chunks, len(schedule.steps)) == (2, 2, 2)
    report = verify(schedule)
    assert report.ok, str(report)


def test_the_topology_example_loads_and_times_the_schedule_as_the_text_says() -> None:
    examples = _json_examples()
    topo = topology.loads(examples[topology.FORMAT])
    assert (topo.ranks, len(topo.links)) == (2, 6)
    assert topo.route(0, 1) == (0, "sw", 1)  # the explicit route
    assert topo.route(1, 0) == (1, 0)  # the direct link: 1 us beats 2 x 0.5 us on hop count
    schedule = fileformat.loads(examples[fileformat.FORMAT])
    result = simulate(schedule, topo, 4e6, mode="lockstep")
    assert result.ok
    # docs/design.md: each step is bounded by the direct link, 1 us + 2 MB / 25 GB/s; two steps = 162 us.
    assert result.time == pytest.approx(2 * (1e-6 + 2e6 / 25e9), rel=1e-9)


# -- docs/usage.md's synopses against the real parsers ----------------------------------------------------------------

USAGE = ROOT / "docs" / "usage.md"
# The options that pick the schedule: a synopsis of a command whose parser has one must show it.
SCHEDULE_FLAGS = ("--collective", "--algorithm", "--ranks", "--chunks", "--root", "--param", "--json")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def synopses(text: str) -> dict[str, str]:
    """Command -> its synopsis lines joined, from the first fenced block after "## The command line"."""
    section = text[text.index("## The command line"):]
    block = re.search(r"^```\n(.*?)^```", section, flags=re.S | re.M)
    assert block is not None, "usage.md: no synopsis block under 'The command line'"
    out: dict[str, str] = {}
    command = ""
    for line in block.group(1).splitlines():
        m = re.match(r"collsched (\w+)(.*)", line)
        if m:
            command = m.group(1)
            out[command] = out.get(command, "") + " " + m.group(2)
        elif line.startswith(" ") and command:
            out[command] += " " + line
    return out


def synopsis_problems(found: dict[str, str], parsers: dict[str, object]) -> list[str]:
    """What a synopsis gets wrong against its command's parser: a flag the parser lacks, or a schedule flag
    (``SCHEDULE_FLAGS``) the parser has that the synopsis leaves out."""
    problems = []
    for command, text in found.items():
        parser = parsers.get(command)
        if parser is None:
            problems.append(f"{command}: no such command")
            continue
        strings = {s for a in parser._actions for s in a.option_strings}  # type: ignore[attr-defined]
        shown = set(_FLAG.findall(text))
        problems += [f"{command}: {flag} is not an option" for flag in sorted(shown - strings)]
        long_shown = {s for a in parser._actions if shown & set(a.option_strings)  # type: ignore[attr-defined]
                      for s in a.option_strings}
        problems += [f"{command}: {flag} is left out" for flag in SCHEDULE_FLAGS
                     if flag in strings and flag not in long_shown]
    return problems


def _parsers() -> dict[str, object]:
    from runners.commands.cli import build_parser

    return dict(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def test_usage_synopses_match_the_parsers() -> None:
    found = synopses(USAGE.read_text(encoding="utf-8"))
    assert {"verify", "export", "simulate", "sweep", "bench", "demo"} <= set(found)
    assert synopsis_problems(found, _parsers()) == []


def test_the_synopsis_check_catches_a_missing_and_a_stale_flag() -> None:
    parsers = _parsers()
    doc = ("## The command line\n\n```\ncollsched export --collective K --algorithm A --ranks P [--chunks k] "
           "[--root R] -o F [--json]\ncollsched bench --nproc N -c K -a A --chunks 2 --root 0 --param x=1\n"
           "               [--frobnicate] [--json]\n```\n")
    assert synopsis_problems(synopses(doc), parsers) == [
        "export: --param is left out", "bench: --frobnicate is not an option"]
