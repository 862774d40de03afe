"""Send order per channel (``Schedule.channels``; docs/design.md, "Send order"): each port keeps one queue per
channel, so an MSCCL++ plan's thread blocks run concurrently, each in its own order, as its executor runs them.

References: a 2-GPU plan of two thread blocks that each put one chunk over one link, timed by hand (channels:
both share the link, α + 2b/B; one queue: one after the other, 2(α + b/B)); the simpy engine against the fast
one on random schedules with random channels and on the plans of the corpus; a schedule whose transfers are all
on one channel against the same schedule without channels, array for array.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms import registry
from algorithms.errors import ScheduleError
from algorithms.formats.mscclpp import read_plan
from algorithms.ir import Buf, Collective, Kind, Op, Schedule, Transfer
from sim.engine import ports as ports_module
from sim.engine.ports import ports
from sim.engine.reference import SimResult, chunk_bytes, simulate
from sim.topology import Topology, from_spec, single_switch
from sim.topology.placement import place
from sim.topology.strategies import topologies
from sim.verify import strategies as cst

DATA = Path(__file__).resolve().parents[2] / "data"
B, ALPHA = 1e9, 1e-4  # the link of the hand-timed plan: bytes/s, seconds


def _sync(op: str) -> dict[str, Any]:
    return {"name": op, "channel_ids": [0], "channel_type": "memory"}


def _threadblock(i: int, data: list[dict[str, Any]], writes: bool) -> dict[str, Any]:
    """Thread block i on memory channel i: meet the peer, the data ops, signal and wait for the peer."""
    ops = [{"name": "nop"}, _sync("rlxsignal"), {"name": "nop"}, _sync("rlxwait"), {"name": "nop"}, *data,
           {"name": "nop"}, _sync("signal"), _sync("wait"), {"name": "nop"}]
    refs = [{"access_channel_type": "memory", "remote_buffer_ids": [0]}] if writes else []
    return {"id": i, "ops": ops, "channels": [{"channel_type": "memory", "channel_ids": [i]}],
            "remote_buffer_refs": refs}


def _put(kind: str, src: int, dst: int) -> dict[str, Any]:
    return {"name": "put", "src_buff": [{"type": kind, "index": src, "size": 1}],
            "dst_buff": [{"buffer_id": 0, "index": dst, "size": 1}], "channel_type": "memory"}


def two_threadblocks() -> dict[str, Any]:
    """GPU 0's thread block 0 puts i[0] to GPU 1; its thread block 1 copies i[1] to scratch, then puts that: a
    put one level later, so in the schedule's next step, and ready at once (a local copy costs nothing)."""
    copy = {"name": "copy", "src_buff": [{"type": "i", "index": 1, "size": 1}],
            "dst_buff": [{"type": "s", "index": 0, "size": 1}]}
    g0 = {"id": 0, "input_chunks": 4, "output_chunks": 0, "scratch_chunks": 1,
          "threadblocks": [_threadblock(0, [_put("i", 0, 2)], True),
                           _threadblock(1, [copy, {"name": "nop"}, _put("s", 0, 3)], True)],
          "channels": [{"channel_type": "memory", "connected_to": [1, 1]}],
          "remote_buffers": [{"rank": 1, "type": "i", "access_channel_types": ["memory"]}], "semaphores": []}
    g1 = {"id": 1, "input_chunks": 4, "output_chunks": 0, "scratch_chunks": 1,
          "threadblocks": [_threadblock(0, [], False), _threadblock(1, [], False)],
          "channels": [{"channel_type": "memory", "connected_to": [0, 0]}], "remote_buffers": [], "semaphores": []}
    return {"name": "two_threadblocks", "collective": "test", "protocol": "Simple", "inplace": False,
            "reuse_resources": False, "gpus": [g0, g1], "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16, "min_message_size": 0,
            "max_message_size": 2**64 - 1}


def without_channels(s: Schedule) -> Schedule:
    return Schedule.from_columns(s.collective, s.name, s.columns(), s.scratch_chunks, switch_ops=s.switch_ops)


def plan_schedule() -> Schedule:
    got = read_plan(two_threadblocks())
    assert got.error() is None and got.schedule is not None
    return got.schedule


def same_times(a: SimResult, b: SimResult) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15) or (math.isnan(x) and math.isnan(y))
               for u, v in ((a.start, b.start), (a.end, b.end)) for x, y in zip(u.tolist(), v.tolist(), strict=True))


def test_the_reader_gives_each_thread_block_its_own_channel() -> None:
    s = plan_schedule()
    assert [[(t.src, t.dst) for t in step.transfers] for step in s.steps] == [[(0, 1), (0, 0)], [(0, 1)]]
    assert s.channels is not None and s.channels.tolist() == [0, 1, 1]
    q = ports(s, from_spec("full:2"))
    assert q.messages == 2 and q.send.ports == 2 and q.send.port_link.tolist() == [q.send.port_link[0]] * 2
    q1 = ports(without_channels(s), from_spec("full:2"))
    assert q1.messages == 2 and q1.send.ports == 1


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_two_threadblocks_on_one_port_run_concurrently_with_channels_and_in_turn_without(engine: str) -> None:
    s = plan_schedule()
    topo = from_spec("full:2", bandwidth=B, latency=ALPHA)
    size = 1e6
    r = simulate(s, topo, size, engine=engine)
    b = r.chunk_bytes
    assert b == 250_000.0
    # Channels: both puts start at 0 and share the link at B/2 each.
    assert r.start[[0, 2]].tolist() == [0.0, 0.0]
    assert math.isclose(r.time, ALPHA + 2 * b / B, rel_tol=1e-12)
    assert math.isclose(r.end[0], r.end[2], rel_tol=1e-12)
    # One queue per port: the second step's put waits for the first to land.
    r1 = simulate(without_channels(s), topo, size, engine=engine)
    assert math.isclose(r1.start[2], ALPHA + b / B, rel_tol=1e-12)
    assert math.isclose(r1.time, 2 * (ALPHA + b / B), rel_tol=1e-12)
    # No queue at all runs them as the channels do here.
    assert same_times(simulate(without_channels(s), topo, size, engine=engine, in_flight=0), r)


def test_one_channel_is_the_queues_without_channels_array_for_array() -> None:
    s = registry.build("allreduce", "rabenseifner", 6)
    one = Schedule.from_columns(s.collective, s.name, s.columns(), s.scratch_chunks,
                                channels=np.full(s.num_transfers, 7))
    topo = single_switch(6, bandwidth=10.0, latency=1.0)
    for engine in ("fast", "simpy"):
        for n in (1, 2):
            a = simulate(s, topo, 1000.0, overhead=0.5, reduce_bandwidth=7.0, engine=engine, in_flight=n)
            c = simulate(one, topo, 1000.0, overhead=0.5, reduce_bandwidth=7.0, engine=engine, in_flight=n)
            assert a.time == c.time
            assert np.array_equal(a.start, c.start) and np.array_equal(a.end, c.end)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, Topology]:
    s = draw(cst.schedules(max_ranks=6, max_chunks=2))
    ch = draw(st.lists(st.integers(0, 2), min_size=s.num_transfers, max_size=s.num_transfers))
    s = Schedule.from_columns(s.collective, s.name, s.columns(), s.scratch_chunks, channels=ch)
    return s, draw(topologies(s.ranks, max_switches=2, min_bandwidth=1.0, max_bandwidth=100.0, max_latency=5.0))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), in_flight=st.sampled_from([1, 2]), overhead=st.sampled_from([0.0, 0.5]))
def test_the_engines_agree_on_schedules_with_channels(case: tuple[Schedule, Topology], in_flight: int,
                                                      overhead: float) -> None:
    s, topo = case
    fast = simulate(s, topo, 1000.0, overhead=overhead, reduce_bandwidth=7.0, engine="fast", in_flight=in_flight)
    ref = simulate(s, topo, 1000.0, overhead=overhead, reduce_bandwidth=7.0, engine="simpy", in_flight=in_flight)
    assert same_times(fast, ref)


def _on_preset(s: Schedule) -> Topology:
    whole = from_spec("dgx-h100:1")
    return place(whole, tuple(range(s.ranks)), partial=True) if s.ranks < whole.ranks else whole


PLANS = ["foreign/mscclpp/alltoall_ring_4gpu.json", "foreign/mscclpp/allreduce_allpairs_rres_4gpu.json",
         "foreign/mscclpp/allreduce_pkt_4gpu.json", "foreign/mscclpp/mn_allgather_2x2.json",
         "foreign/mscclpp/allgather_nvls_zero_copy_pkt_4gpu.json",  # switch operations: lowered, channels kept
         "foreign/mscclpp/allreduce_pipeline_2gpu.json",
         "mscclpp_heldout/default_allgather_multi_nodes_8_4_inplace.json"]  # channels change its time


@pytest.mark.parametrize("name", PLANS)
def test_the_engines_agree_on_the_corpus_plans_with_their_thread_blocks(name: str) -> None:
    s = read_plan((DATA / name).read_text()).schedule
    assert s is not None and s.channels is not None
    topo = _on_preset(s)
    for n in (1, 2):
        fast = simulate(s, topo, 16 << 20, engine="fast", in_flight=n)
        assert fast.ok or s.name.startswith("custom:")
        assert same_times(fast, simulate(s, topo, 16 << 20, engine="simpy", in_flight=n))


@pytest.mark.parametrize(("channels", "second"), [([0, 1, 1], 3e-4), (None, 3.5e-4)])
def test_the_closed_form_queues_per_channel_too(channels: list[int] | None, second: float) -> None:
    """Rank 0 sends a chunk (channel 0) and reduces another into scratch (channel 1, 3e-4 s at its reduction
    rate), then sends that (channel 1): on its own channel the second send starts when the reduction ends, in
    one queue when the first has landed (b/B + α = 3.5e-4 s). No two flows ever share the link, so the fast
    engine times it step by step (``StepGates``), and simpy event by event, to the same hand times."""
    from sim.engine.fast import run_fast
    from sim.engine.options import EngineOptions

    coll = Collective(Kind.ALLGATHER, 2, 2)
    steps = [[Transfer(0, 1, Buf.INPUT, 0, Buf.OUTPUT, 0), Transfer(0, 0, Buf.INPUT, 1, Buf.SCRATCH, 0, 1, Op.REDUCE)],
             [Transfer(0, 1, Buf.SCRATCH, 0, Buf.OUTPUT, 1)]]
    s = Schedule(coll, "two_channels", steps, 1, channels=channels)
    topo = from_spec("full:2", bandwidth=B, latency=ALPHA)
    b = chunk_bytes(coll, 1e6)
    assert b == 250_000.0
    opts = EngineOptions(reduce_bandwidth=b / 3e-4)
    got = run_fast(s, topo, 1e6, opts, b)
    assert got["closed_form"]
    want = [0.0, 0.0, second], [b / B + ALPHA, 3e-4, second + b / B + ALPHA]
    for engine in ("fast", "simpy"):
        r = simulate(s, topo, 1e6, opts, engine=engine)
        assert np.allclose(r.start, want[0], rtol=1e-12, atol=0) and np.allclose(r.end, want[1], rtol=1e-12, atol=0)


def test_thread_blocks_as_channels_shorten_a_plan_that_one_queue_serialises() -> None:
    s = read_plan((DATA / PLANS[-1]).read_text()).schedule
    assert s is not None
    topo = _on_preset(s)
    assert simulate(s, topo, 16 << 20).time < simulate(without_channels(s), topo, 16 << 20).time


def test_an_engine_that_drops_the_channels_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the fast engine's queues built without the channels differ from simpy's."""
    import sim.engine.fast as fast_module

    def one_queue(schedule: Schedule, topology: Topology, queued: Any = None, channels: Any = None) -> Any:
        return ports_module.ports(schedule, topology, queued, np.zeros(schedule.num_transfers, dtype=np.int64))

    monkeypatch.setattr(fast_module, "ports", one_queue)
    s = plan_schedule()
    topo = from_spec("full:2", bandwidth=B, latency=ALPHA)
    assert not same_times(simulate(s, topo, 1e6, engine="fast"), simulate(s, topo, 1e6, engine="simpy"))


def test_channels_are_checked_and_part_of_the_value() -> None:
    s = registry.build("allgather", "ring", 3)
    n = s.num_transfers
    with pytest.raises(ScheduleError, match="entries"):
        Schedule.from_columns(s.collective, s.name, s.columns(), channels=[0] * (n + 1))
    with pytest.raises(ScheduleError, match=r"channels\[1\] is -1"):
        Schedule.from_columns(s.collective, s.name, s.columns(), channels=[0, -1] + [0] * (n - 2))
    with pytest.raises(ScheduleError, match="integers"):
        Schedule(s.collective, s.name, s.steps, channels=np.full(n, 0.5))
    a = Schedule(s.collective, s.name, s.steps, channels=range(n))
    assert a.channels is not None and not a.channels.flags.writeable
    assert a != s and a == Schedule(s.collective, s.name, s.steps, channels=list(range(n)))
    assert hash(a) == hash(pickle.loads(pickle.dumps(a))) and pickle.loads(pickle.dumps(a)) == a
    assert without_channels(a) == s
