"""The campaign file: its axes, their expansion into configurations, the keys, and the cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from algorithms import registry
from sim.campaign import spec
from sim.campaign.spec import Campaign, CampaignError, check_cap, config_key, load_campaign, parse_campaign


def _doc(**over: object) -> dict[str, object]:
    return {"collectives": ["allreduce"], "algorithms": ["ring"], "topologies": ["ring:4"], "sizes": ["1KiB"],
            **over}


def test_expansion_is_the_product_of_the_axes(small: Path) -> None:
    c = load_campaign(small)
    n_allgather = len(list(registry.algorithms("allgather")))
    variants = {"allreduce": 5, "allgather": n_allgather, "broadcast": 4}
    assert {k: len(v) for k, v in c.variants.items()} == variants
    assert c.count() == sum(variants.values()) * 3 * 4 * 1 * 1
    configs = list(c.configs())
    assert len(configs) == c.count()
    assert len({x.key for x in configs}) == len(configs)  # every configuration its own key
    ring = [x for x in configs if x.collective == "allreduce" and x.variant.algorithm == "ring"]
    assert sorted({x.variant.label for x in ring}) == ["ring", "ring chunks=2", "ring chunks=4"]
    assert {x.topology.label for x in configs} == {"ring:4", "switch:4", "torus-fast"}
    assert sorted({x.size for x in configs}) == [1024, 16384, 262144, 4 << 20]
    fast = next(x for x in configs if x.topology.label == "torus-fast")
    assert fast.canonical()["topology"] == {"spec": "torus:2x3", "bandwidth": "100GB/s"}
    assert next(x for x in configs if x.collective == "broadcast").canonical()["root"] == 0


def test_grids_modes_runtimes_and_size_ranges() -> None:
    c = parse_campaign(_doc(algorithms=[{"name": "ring", "params": {"chunks": [1, 2, 3]}}], sizes="1KiB:16KiB",
                            modes=["dataflow", "lockstep"], runtimes=["default", "collsched"],
                            topologies=["ring:4", "ring:8"]))
    assert c.sizes == (1024, 2048, 4096, 8192, 16384)
    assert c.runtimes == (None, "collsched")
    assert c.count() == 3 * 5 * 2 * 2 * 2 == len(list(c.configs()))
    star = parse_campaign(_doc(algorithms=[{"name": "*", "params": {"chunks": [1, 2]}}]))
    assert len(star.variants["allreduce"]) == 2 * len(list(registry.algorithms("allreduce")))


def test_the_key_covers_the_configuration_and_the_version() -> None:
    a = next(parse_campaign(_doc()).configs())
    assert a.key == next(parse_campaign(_doc()).configs()).key  # stable
    assert a.key != next(parse_campaign(_doc(sizes=["2KiB"])).configs()).key
    assert a.key != next(parse_campaign(_doc(network={"overhead": "1us"})).configs()).key
    assert a.key != config_key(a.canonical(), "9.9.9")
    assert a.key == config_key(json.loads(json.dumps(a.canonical())), a.campaign.version)


@pytest.mark.parametrize(("over", "message"), [
    ({"algorithms": ["nope"]}, "unknown algorithm 'nope'"),
    ({"algorithms": [{"name": "ring", "params": {"chunks": [0]}}]}, "chunks must be an integer >= 1"),
    ({"collectives": ["allsum"]}, "unknown collective 'allsum'"),
    ({"sizes": ["huge"]}, "sizes[0]"),
    ({"modes": ["fast"]}, "'fast' is not one of"),
    ({"topologies": ["ring:4", "ring:4"]}, "listed twice"),
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"network": {"speed": "1"}}, "unknown key 'speed'"),
])
def test_bad_files_name_the_key(over: dict[str, object], message: str) -> None:
    with pytest.raises(CampaignError, match=None) as e:
        parse_campaign(_doc(**over))
    assert message in str(e.value)


def test_json_and_toml_read_alike(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(json.dumps(_doc(store="here.sqlite")))
    (tmp_path / "c.toml").write_text('collectives = ["allreduce"]\nalgorithms = ["ring"]\ntopologies = ["ring:4"]\n'
                                     'sizes = ["1KiB"]\nstore = "here.sqlite"\n')
    a, b = load_campaign(tmp_path / "c.json"), load_campaign(tmp_path / "c.toml")
    assert [x.key for x in a.configs()] == [x.key for x in b.configs()]
    assert a.store == str(tmp_path / "here.sqlite")  # relative to the file
    (tmp_path / "c.txt").write_text("{}")
    with pytest.raises(CampaignError, match=r"expected a \.toml"):
        load_campaign(tmp_path / "c.txt")


def test_the_cap_refuses_before_expanding(monkeypatch: pytest.MonkeyPatch) -> None:
    c = parse_campaign(_doc(algorithms=[{"name": "ring", "params": {"chunks": list(range(1, 101))}}],
                            topologies=[f"ring:{p}" for p in range(2, 102)], sizes="1:1GiB"))
    def no(self: Campaign) -> None:
        raise AssertionError("expanded")

    monkeypatch.setattr(Campaign, "configs", no)
    with pytest.raises(CampaignError, match=r"expands to 310,000 configurations, more than the cap of 250,000"):
        check_cap(c)
    assert check_cap(c, 10**6) == 310_000
    assert spec.MAX_CONFIGS == 250_000
