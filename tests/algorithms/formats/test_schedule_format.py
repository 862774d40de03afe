"""The collsched.schedule/1 file format: round trip, strict validation, a fuzzed loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import ScheduleError, build
from algorithms import formats as fileformat
from sim.verify import strategies as cst

GOOD = {
    "format": "collsched.schedule/1",
    "name": "ring",
    "collective": {"kind": "allreduce", "ranks": 2, "chunks": 2, "root": None},
    "scratch_chunks": 0,
    "steps": [
        [{"src": 0, "dst": 1, "src_buf": "input", "src_index": 0, "dst_buf": "input", "dst_index": 0,
          "count": 1, "op": "reduce"}],
    ],
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cst.schedules(max_ranks=12))
def test_round_trip_is_exact(schedule) -> None:  # type: ignore[no-untyped-def]
    assert fileformat.loads(fileformat.dumps(schedule)) == schedule


def test_save_and_load_a_file(tmp_path: Path) -> None:
    s = build("broadcast", "binomial", 5, root=3, chunks=2)
    fileformat.save(s, tmp_path / "b.json")
    assert fileformat.load(tmp_path / "b.json") == s
    assert json.loads((tmp_path / "b.json").read_text())["format"] == "collsched.schedule/1"


def _doc(**changes: object) -> dict:
    doc = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        *head, last = path.split("__")
        target = doc
        for key in head:
            target = target[int(key) if key.isdigit() else key]
        if value is KeyError:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"extra": 1}, "Additional properties.*'extra'"),
        ({"format": "collsched.schedule/2"}, "field format"),
        ({"name": KeyError}, "'name' is a required property"),
        ({"collective__ranks": "4"}, "collective.ranks"),
        ({"collective__ranks": 0}, "collective.ranks"),
        ({"collective__kind": "allsum"}, "collective.kind"),
        ({"collective__ranks": 10**12}, "collective.ranks must be <= 65536"),
        ({"scratch_chunks": 10**12}, "scratch_chunks must be <="),
        ({"collective__root": 0}, "collective.root"),
        ({"collective__color": 0}, "collective"),
        ({"scratch_chunks": -1}, "scratch_chunks"),
        ({"steps": {}}, "field steps"),
        ({"steps__0__0__count": 0}, r"steps\.0\.0\.count"),
        ({"steps__0__0__src": True}, r"steps\.0\.0\.src"),
        ({"steps__0__0__op": "max"}, r"steps\.0\.0\.op"),
        ({"steps__0__0__dst_buf": "heap"}, r"steps\.0\.0\.dst_buf"),
        ({"steps__0__0__extra": 1}, r"steps\.0\.0.*extra"),
        ({"steps__0__0__src_index": KeyError}, r"steps\.0\.0.*src_index"),
        ({"steps__0__0__dst": 2}, "step 0 transfer 0: dst rank 2"),
        ({"steps__0__0__src_index": 2}, "step 0 transfer 0: src_index 2"),
    ],
)
def test_invalid_documents_name_the_field(changes: dict, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        fileformat.from_dict(_doc(**changes))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ('{"a": NaN}', "NaN"),
        ("[1, 2]", "is not of type 'object'"),
        ("1" * 5000, "not valid JSON"),
    ],
)
def test_bad_text_is_a_schedule_error(text: str | bytes, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        fileformat.loads(text)


def test_oversized_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from algorithms.formats import schedule

    monkeypatch.setattr(schedule, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(GOOD))
    with pytest.raises(ScheduleError, match="over the limit of 100"):
        fileformat.load(path)
    with pytest.raises(ScheduleError, match="over the limit of 100"):
        fileformat.loads(json.dumps(GOOD))


def test_unreadable_path_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r"nope\.json: cannot read"):
        fileformat.load(tmp_path / "nope.json")
    with pytest.raises(ScheduleError, match="cannot read"):
        fileformat.load(tmp_path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_loader_fuzz_arbitrary_json_values(value: object) -> None:
    try:
        fileformat.loads(json.dumps(value))
    except ScheduleError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_loader_fuzz_arbitrary_bytes(data: bytes) -> None:
    try:
        fileformat.loads(data)
    except ScheduleError:
        pass


KEYS = [["name"], ["format"], ["scratch_chunks"], ["steps"], ["collective"], ["collective", "kind"],
        ["collective", "ranks"], ["collective", "chunks"], ["collective", "root"], ["steps", 0],
        ["steps", 0, 0]] + [["steps", 0, 0, k] for k in GOOD["steps"][0][0]]  # type: ignore[index]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(KEYS), JSON)
def test_loader_fuzz_one_field_of_a_valid_document(path: list, value: object) -> None:
    doc = json.loads(json.dumps(GOOD))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    try:
        fileformat.from_dict(doc)
    except ScheduleError:
        pass
