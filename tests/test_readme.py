"""README's code blocks, and docs/usage.md's, run as written.

Every fenced block of README.md and docs/usage.md is found (README first); what happens to it depends on its
language and on an optional tag, an HTML comment on the line right above the
opening fence (invisible on GitHub):

- an untagged ```` ```python ```` block runs: all of them, in README order, in
  one namespace (as a reader pasting them into one session would), inside
  this test process with a temporary directory as the working directory;
  then (a ``slow`` test) every ``test_*`` function they define is called (the
  hypothesis snippet defines one). Algorithms they register are unregistered
  afterwards.
- ``<!-- readme-test: torchrun N -->``: a python block that needs N ranks runs
  as a script under ``torchrun --nproc_per_node=N`` on gloo (one test per
  block, marked ``multiprocess`` and ``slow``); every rank must exit 0.
- ``<!-- readme-test: file PATH -->``: the block's text is written to PATH in
  the temporary directory (a user's module, a schedule file) before any
  block runs; it is not executed itself.
- ``<!-- readme-test: run -->``: a shell block, run as one ``bash -e``
  script in the temporary directory (the files above written, the venv's
  ``bin`` first on PATH, the repository on PYTHONPATH); it must exit 0.
  Marked ``multiprocess`` and ``slow``.
- ``<!-- readme-test: skip REASON -->``: not run; the reason is required.
- untagged non-python blocks (synopses, the two main commands, which take
  minutes) are not run.

An unknown tag fails, so a typo cannot silently turn a block off.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from algorithms import registry

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = (README, ROOT / "docs" / "usage.md")
TAG = re.compile(r"<!--\s*readme-test:\s*(?P<what>\w+)\s*(?P<arg>.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    line: int
    """1-based line of the opening fence."""
    lang: str
    text: str
    tag: str | None
    arg: str
    file: str = "README.md"

    def where(self) -> str:
        return f"{self.file}:{self.line} ({self.lang or 'plain'} block)"


def blocks(text: str, file: str = "README.md") -> list[Block]:
    """Every fenced block of a markdown text, with the readme-test tag right above it (if any)."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise AssertionError(f"{file}:{start + 1}: a fenced block is never closed")
        tag = TAG.search(lines[start - 1]) if start > 0 else None
        if tag is None and start > 0 and "readme-test" in lines[start - 1]:
            raise AssertionError(f"{file}:{start}: malformed readme-test tag {lines[start - 1]!r}")
        out.append(Block(start + 1, m.group(1), "\n".join(lines[start + 1:j]) + "\n",
                         tag.group("what") if tag else None, tag.group("arg") if tag else "", file))
        i = j + 1
    return out


ALL = [b for path in DOCS for b in blocks(path.read_text(), str(path.relative_to(ROOT)))]
KNOWN_TAGS = {"torchrun", "file", "run", "skip"}


def test_every_tag_is_known_and_well_formed() -> None:
    for b in ALL:
        if b.tag is None:
            continue
        assert b.tag in KNOWN_TAGS, f"{b.where()}: unknown readme-test tag {b.tag!r} (known: {sorted(KNOWN_TAGS)})"
        if b.tag == "torchrun":
            assert b.lang == "python" and b.arg.isdigit() and int(b.arg) >= 1, f"{b.where()}: torchrun N on python"
        if b.tag in ("file", "skip"):
            assert b.arg, f"{b.where()}: readme-test {b.tag} needs an argument"
        if b.tag == "file":
            assert not Path(b.arg).is_absolute() and ".." not in Path(b.arg).parts, f"{b.where()}: a relative path"


def test_the_parser_finds_blocks_and_tags() -> None:
    doc = "text\n<!-- readme-test: torchrun 4 -->\n```python\nx = 1\n```\n```\nplain\n```\n"
    found = blocks(doc)
    assert [(b.line, b.lang, b.text, b.tag, b.arg) for b in found] == [
        (3, "python", "x = 1\n", "torchrun", "4"), (6, "", "plain\n", None, "")]
    with pytest.raises(AssertionError, match="never closed"):
        blocks("```python\nx = 1\n")
    # README has python blocks at all (the ones below would otherwise pass vacuously).
    assert any(b.lang == "python" and b.tag is None for b in ALL)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary working directory holding README's file blocks, importable, with the registry restored after."""
    for b in ALL:
        if b.tag == "file":
            path = tmp_path / b.arg
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(b.text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(registry._REGISTRY)
    modules = set(sys.modules)
    try:
        yield tmp_path
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(before)
        for name in set(sys.modules) - modules:
            mod = sys.modules.get(name)
            if mod is not None and str(getattr(mod, "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]


def _run_python_blocks() -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "readme"}
    for b in ALL:
        if b.lang == "python" and b.tag is None:
            try:
                exec(compile(b.text, b.where(), "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"{b.where()} fails: {type(e).__name__}: {e}") from e
    return namespace


def test_python_blocks_run(workdir: Path) -> None:
    _run_python_blocks()


def test_the_declared_algorithm_example_is_what_it_says(workdir: Path) -> None:
    """README's "declare what it takes" example: a chunks parameter, a check, constraints and a Cost that
    match the schedule it builds (cost measured here from the transfers, by hand: one port per rank)."""
    _run_python_blocks()
    from algorithms.ir import Kind
    from sim.verify import verify

    alg = registry.get("allreduce", "my-ring-k")
    assert [p.name for p in alg.parameters] == ["chunks", "group"] and alg.constraints == ("group divides p",)
    assert alg.unsupported(5, {}) is not None and alg.unsupported(6, {"group": 3}) is None
    p, k, n = 6, 3, 6 * 3 * 1024.0
    s = alg.build(p, chunks=k, group=3)
    assert s.collective.kind is Kind.ALLREDUCE and s.collective.chunks == p * k and verify(s).ok
    chunk = n / (p * k)
    bytes_path = sum(max(sum(1 for t in st.transfers if t.src == r) for r in range(p)) for st in s.steps) * chunk
    assert alg.cost is not None and alg.cost.steps(p, n, {"chunks": k}) == len(s.steps) == 2 * (p - 1)
    assert alg.cost.bytes(p, n, {"chunks": k}) == pytest.approx(bytes_path)


def test_the_readme_says_how_to_activate_and_what_each_command_installs() -> None:
    text = README.read_text()
    between = text[text.index("<!-- main-command -->"):text.index("## The loop")]
    assert ". .venv/bin/activate" in between
    assert ".[dev]" in between and "pytest" in between


@pytest.mark.slow
def test_the_tests_python_blocks_define_pass(workdir: Path) -> None:
    namespace = _run_python_blocks()
    tests = [(name, f) for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert tests, "README's python blocks define no test_* function (the hypothesis snippet does)"
    for name, f in tests:
        try:
            f()
        except Exception as e:
            raise AssertionError(f"README's {name} fails: {type(e).__name__}: {e}") from e


TORCHRUN = [b for b in ALL if b.tag == "torchrun"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("block", TORCHRUN, ids=[f"line{b.line}" for b in TORCHRUN])
def test_torchrun_blocks_run_on_gloo_ranks(block: Block, workdir: Path) -> None:
    script = workdir / f"readme_line{block.line}.py"
    script.write_text(block.text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(workdir)]), "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={block.arg}",
           str(script)]
    r = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{block.where()} under torchrun exits {r.returncode}:\n{r.stdout[-3000:]}\n" \
                              f"{r.stderr[-3000:]}"


RUN = [b for b in ALL if b.tag == "run"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("block", RUN, ids=[f"line{b.line}" for b in RUN])
def test_run_blocks_exit_0(block: Block, workdir: Path) -> None:
    assert shlex.split(block.text, comments=True), f"{block.where()}: a run block with no command"
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run(["bash", "-e", "-x", "-c", block.text], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"{block.where()} exits {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def test_the_docs_assert_schedules_with_assert_verified() -> None:
    """``assert verify(s).ok`` fails with a bare ``assert False``; ``assert_verified(s)`` lists the violations."""
    for b in ALL:
        if b.lang == "python":
            assert not re.search(r"assert\s+verify\(", b.text), f"{b.where()}: use assert_verified(schedule)"
    [hypothesis_block] = [b for b in ALL if b.lang == "python" and "cst.schedules" in b.text]
    assert "assert_verified(schedule)" in hypothesis_block.text


def test_the_readme_property_test_names_what_is_wrong(workdir: Path) -> None:
    # The property test's body on a broken schedule (ring all-reduce without its last step): the failure lists
    # the schedule and its violations, not just "assert False".
    from algorithms import Schedule

    namespace = _run_python_blocks()
    inner = namespace["test_my_ring"].hypothesis.inner_test  # type: ignore[attr-defined]
    ring = registry.build("allreduce", "ring", 4)
    broken = Schedule(ring.collective, ring.name, ring.steps[:-1])
    with pytest.raises(AssertionError) as e:
        inner(broken, None)
    assert str(e.value).startswith("ring (allreduce p=4 C=4) fails verification: ")
    assert "wrong_slot" in str(e.value)


def test_the_rooted_example_takes_its_root_from_the_registry(workdir: Path) -> None:
    """README's rooted example: the registry hands the builder ``root`` (0 by default, ``--root R``), and the
    schedule it builds is that root's broadcast for every root."""
    import inspect

    from algorithms.ir import Kind
    from sim.verify import verify

    _run_python_blocks()
    alg = registry.get("broadcast", "my-chain")
    assert inspect.signature(alg.builder).parameters["root"].kind is inspect.Parameter.KEYWORD_ONLY
    assert alg.build(4).collective.root == 0  # no root given: 0
    for p in range(1, 7):
        for root in range(p):
            s = alg.build(p, root=root)
            assert s.collective.kind is Kind.BROADCAST and s.collective.root == root
            assert verify(s).ok and len(s.steps) == p - 1  # a chain: p - 1 hops from the root
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert "root=R" in usage and "Collective(Kind.BROADCAST, p, 1, root)" in README.read_text()
