"""The backend's algorithm policy: defaults, JSON tuning files, COLLSCHED_ALGORITHMS, validation, caching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from algorithms import registry
from algorithms.ir import Kind
from runners.backend.policy import (
    DEFAULTS,
    ENV_ALGORITHMS,
    ENV_TUNING,
    HAND_DEFAULTS,
    P2P,
    TUNED_TABLE,
    TUNING_FORMAT,
    Choice,
    Policy,
    PolicyError,
    Rule,
    parse_algorithms,
    schedule,
)
from sim.verify.verifier import verify


def _registered(kind: Kind) -> set[str]:
    return {a.name for a in registry.algorithms(kind)}


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("nbytes", [0, 1024, 1 << 20, 64 << 20])
def test_defaults_pick_a_registered_algorithm_that_serves(kind: Kind, ranks: int, nbytes: int) -> None:
    choice = Policy.defaults().choose(kind, nbytes, ranks)
    if choice.algorithm == P2P:
        # Only when no default candidate for this band is registered and able to serve.
        band = next(rule for rule in DEFAULTS[kind] if rule.covers(nbytes, ranks))
        for name in {c.algorithm for c in band.candidates} & _registered(kind):
            assert registry.get(kind, name).unsupported(ranks) is not None
    else:
        assert choice.algorithm in _registered(kind)
        assert registry.get(kind, choice.algorithm).unsupported(ranks) is None
        assert schedule(kind, choice, ranks, 0 if kind in {Kind.BROADCAST, Kind.REDUCE, Kind.SCATTER,
                                                        Kind.GATHER} else None).ranks == ranks


def test_defaults_use_the_library_ring_for_large_allreduce() -> None:
    assert Policy.defaults().choose("allreduce", 16 << 20, 9) == Choice("ring")
    assert Policy(dict(HAND_DEFAULTS)).choose("allreduce", 64 << 20, 4) == Choice("ring", (("chunks", 4),))


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_hand_made_allreduce_bands_on_few_ranks(ranks: int) -> None:
    # The bands' edges on at most 8 ranks: recursive doubling up to 1 MiB, direct above and up to 32 MiB.
    hand = Policy(dict(HAND_DEFAULTS))
    assert hand.choose("allreduce", 1 << 20, ranks) == Choice("recursive_doubling")
    assert hand.choose("allreduce", (1 << 20) + 1, ranks) == Choice("direct")
    assert hand.choose("allreduce", 32 << 20, ranks) == Choice("direct")
    assert hand.choose("allreduce", (32 << 20) + 1, ranks) == Choice("ring", (("chunks", 4),))
    # Larger worlds: recursive doubling only up to 64 KiB, then the ring.
    assert hand.choose("allreduce", 64 << 10, 9) == Choice("recursive_doubling")
    assert hand.choose("allreduce", (64 << 10) + 1, 9) == Choice("ring")
    assert hand.choose("allreduce", 1 << 20, 9) == Choice("ring")


SIZES = (0, 1024, 65536, 65537, 1 << 20, (1 << 20) + 1, 4 << 20, 32 << 20, 64 << 20, 1 << 30)


def test_defaults_are_the_tuned_table_then_the_hand_made_bands() -> None:
    """The checked-in table, read here as plain JSON (first rule whose ranks and max_bytes contain the
    call), decides on the world sizes it was tuned for; the hand-made bands decide on the others."""
    doc = json.loads(TUNED_TABLE.read_text())
    defaults, hand = Policy.defaults(), Policy(dict(HAND_DEFAULTS))
    tuned_ranks: set[int] = set()
    for kind, rules in doc["rules"].items():
        for p in {r["min_ranks"] for r in rules}:
            tuned_ranks.add(p)
            for size in SIZES:
                rule = next(r for r in rules if r["min_ranks"] <= p <= r["max_ranks"]
                            and size <= r.get("max_bytes", size))
                want = Choice(rule["algorithm"], tuple(sorted(rule.get("params", {}).items())))
                assert defaults.choose(kind, size, p) == want, (kind, size, p)
    assert tuned_ranks == {2, 4}
    for kind in Kind:
        for p in (1, 3, 5, 8, 9, 16):
            for size in SIZES:
                assert defaults.choose(kind, size, p) == hand.choose(kind, size, p)


def test_env_var_pins_one_algorithm_per_kind_with_parameters() -> None:
    policy = Policy.from_env({ENV_ALGORITHMS: "allreduce=ring:chunks=4, allgather=p2p"})
    assert policy.choose(Kind.ALLREDUCE, 10, 4) == Choice("ring", (("chunks", 4),))
    assert policy.choose(Kind.ALLREDUCE, 1 << 30, 4) == Choice("ring", (("chunks", 4),))
    assert policy.choose(Kind.ALLGATHER, 1 << 20, 4) == Choice(P2P)
    assert str(policy.choose(Kind.ALLREDUCE, 10, 4)) == "ring:chunks=4"
    # Kinds the variable does not name keep their defaults.
    assert policy.choose(Kind.BROADCAST, 1 << 20, 4) == Policy.defaults().choose(Kind.BROADCAST, 1 << 20, 4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("allreduce=nope", "unknown algorithm 'nope' for allreduce (known: "),
        ("allreduse=ring", "unknown collective 'allreduse'"),
        ("allreduce", "expected KIND=ALGORITHM"),
        ("allreduce=ring:chunks=x", "chunks must be an integer >= 1, got 'x'"),
        ("allreduce=ring:chunks", "parameter must be NAME=VALUE"),
        ("allreduce=ring:chunks=2:4", "parameter must be NAME=VALUE, got '4'"),
        ("allreduce=ring:chunks=0", "chunks must be an integer >= 1"),
        ("allreduce=ring:width=2", "unknown parameter 'width'"),
        ("allreduce=ring,allreduce=ring", "allreduce is given twice"),
        ("allgather=p2p:chunks=2", "p2p takes no parameters"),
    ],
)
def test_env_var_errors_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(PolicyError, match="COLLSCHED_ALGORITHMS") as err:
        Policy.from_env({ENV_ALGORITHMS: spec})
    assert message in str(err.value)


def _tuning(tmp_path: Path, rules: object, **extra: object) -> Path:
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"format": TUNING_FORMAT, "rules": rules, **extra}))
    return path


def test_tuning_file_rules_by_size_and_ranks(tmp_path: Path) -> None:
    path = _tuning(tmp_path, {"allreduce": [
        {"algorithm": P2P, "max_bytes": 4096},
        {"algorithm": "ring", "params": {"chunks": 2}, "min_ranks": 4},
    ]})
    policy = Policy.from_env({ENV_TUNING: str(path)})
    assert policy.choose(Kind.ALLREDUCE, 4096, 8) == Choice(P2P)
    assert policy.choose(Kind.ALLREDUCE, 4097, 8) == Choice("ring", (("chunks", 2),))
    # Two ranks match no tuning rule past 4 KiB: the defaults remain as the last resort.
    assert policy.choose(Kind.ALLREDUCE, 1 << 20, 2) == Policy.defaults().choose(Kind.ALLREDUCE, 1 << 20, 2)


def test_env_var_overrides_tuning_file(tmp_path: Path) -> None:
    path = _tuning(tmp_path, {"allreduce": [{"algorithm": P2P}]})
    policy = Policy.from_env({ENV_TUNING: str(path), ENV_ALGORITHMS: "allreduce=ring"})
    assert policy.choose(Kind.ALLREDUCE, 1, 4) == Choice("ring")
    assert Policy.from_env({}, tuning=path).choose(Kind.ALLREDUCE, 1, 4) == Choice(P2P)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"format": "other/1", "rules": {}}, "format: must be 'collsched.tuning/1'"),
        ({"format": TUNING_FORMAT, "rules": {}, "extra": 1}, "unknown key 'extra'"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": {}}}, "rules.allreduce: must be a list"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": [{"algorithm": "nope"}]}}, "unknown algorithm 'nope'"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": [{"algo": "ring"}]}}, "rules.allreduce[0]: unknown key"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": [{}]}}, "missing key 'algorithm'"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": [{"algorithm": "ring", "max_bytes": -1}]}},
         "max_bytes: must be an integer >= 0"),
        ({"format": TUNING_FORMAT, "rules": {"allreduce": [{"algorithm": "ring", "min_ranks": True}]}},
         "min_ranks: must be an integer >= 1"),
        ({"format": TUNING_FORMAT, "rules": {"bcast": []}}, "unknown collective 'bcast'"),
        ([], "must be a JSON object"),
    ],
)
def test_tuning_file_errors_name_the_file_and_field(tmp_path: Path, document: object, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(PolicyError) as err:
        Policy.from_env({ENV_TUNING: str(path)})
    assert str(path) in str(err.value)
    assert message in str(err.value)


def test_unreadable_or_malformed_tuning_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read tuning file"):
        Policy.from_env({ENV_TUNING: str(tmp_path / "missing.json")})
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(PolicyError, match="not valid JSON"):
        Policy.from_env({ENV_TUNING: str(tmp_path / "broken.json")})


def test_validate_rejects_a_pinned_algorithm_that_cannot_serve_the_world_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ring = registry.get(Kind.ALLREDUCE, "ring")
    pow2 = registry.Algorithm(Kind.ALLREDUCE, "pow2_test", ring.builder, "test",
                              check=lambda p, _k: None if p & (p - 1) == 0 else "needs a power of two")
    monkeypatch.setitem(registry._REGISTRY, (Kind.ALLREDUCE, "pow2_test"), pow2)
    policy = Policy.from_env({ENV_ALGORITHMS: "allreduce=pow2_test"})
    policy.validate(4)
    with pytest.raises(PolicyError, match="allreduce=pow2_test cannot serve 6 ranks: needs a power of two"):
        policy.validate(6)
    # As a default candidate the same algorithm is skipped instead, for the next one that serves.
    monkeypatch.setitem(DEFAULTS, Kind.ALLREDUCE, (Rule((Choice("pow2_test"), Choice("ring"))),))
    assert Policy.defaults().choose(Kind.ALLREDUCE, 1, 4) == Choice("pow2_test")
    assert Policy.defaults().choose(Kind.ALLREDUCE, 1, 6) == Choice("ring")


def test_env_var_names_the_synthesizer_with_its_topology() -> None:
    # A text value may hold colons: the topology SPEC of the synthesizer (issue 15: the backend names it).
    policy = Policy.from_env({ENV_ALGORITHMS: "allgather=synth:topology=cluster:2x4:chunks=2"})
    choice = policy.choose(Kind.ALLGATHER, 1 << 20, 8)
    assert choice == Choice("synth", (("chunks", 2), ("topology", "cluster:2x4")))
    built = schedule(Kind.ALLGATHER, choice, 8)
    assert built.name == "synth" and built.ranks == 8 and verify(built).ok
    # The topology is checked against the world size when the backend validates the policy.
    with pytest.raises(PolicyError, match="synth"):
        policy.validate(4)


def test_schedules_are_built_once() -> None:
    schedule.cache_clear()
    first = schedule(Kind.ALLREDUCE, Choice("ring"), 4)
    assert schedule(Kind.ALLREDUCE, Choice("ring"), 4) is first
    assert schedule.cache_info().hits == 1
    assert schedule(Kind.ALLREDUCE, Choice("ring", (("chunks", 2),)), 4) is not first


def test_parse_algorithms_ignores_blank_items() -> None:
    assert set(parse_algorithms("allreduce=ring,, ")) == {Kind.ALLREDUCE}


def test_describe_lists_every_kind() -> None:
    table = Policy.defaults().describe(4)
    assert set(table) == {k.value for k in Kind}
    assert table["allreduce"][64 << 20] == str(Policy.defaults().choose("allreduce", 64 << 20, 4))
    assert Policy(dict(HAND_DEFAULTS)).describe(4)["allreduce"][64 << 20] == "ring:chunks=4"
