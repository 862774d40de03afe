"""-a nccl runs NCCL's pipelined schedules in step order (sim.machine.nccl.PIPELINE_MODES): the 2-node NVLSTree
against the nccl-tests #309 table and the NVSwitch port's bound, the 8-node tree against its busiest link's bound."""

from __future__ import annotations

from pathlib import Path

from sim.machine.nccl import simulate_nccl
from sim.machine.published import load_table
from sim.topology import from_spec

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
TABLE = ROOT / "tests" / "data" / "published" / "h100_2x8_allreduce_nccltests309_default.tsv"


def test_two_node_nvls_tree_runs_in_lockstep_and_meets_the_table() -> None:
    size = 64 << 20
    measured = dict(load_table(TABLE).rows)[size]  # 466.1 us, NCCL 2.26.2 default (NVLSTree at this size)
    run = simulate_nccl("allreduce", from_spec("dgx-h100:2"), size, algo="nvls_tree", mode="dataflow")
    assert run.result.mode == "lockstep" and any("lockstep" in n for n in run.notes)
    # By hand: each GPU's NVSwitch port takes its whole buffer up for the reduction and its 1/8 piece up again
    # for the multicast, (1 + 1/8) x 64 MiB, at the port's NVLS rate 9 x 40 GB/s x 0.85 = 306 GB/s.
    assert run.time >= 1.125 * size / 306e9
    # The dataflow run of the same schedule took 611 us here (+31%); lockstep is within 10% of the measurement.
    assert abs(run.time - measured) / measured < 0.10


def test_many_node_tree_pipelines_its_chunks() -> None:
    # NCCL_ALGO=Tree, Simple, on 8 DGX H100 at 1 GiB. By hand: in each of the 8 channels (one per rail) the chain of
    # a node's 8 GPUs carries both trees' shares (1/16 of the data each) up and down, so a GPU sends 4/16 of the data
    # per channel, 2/16 in the two channels it heads or ends: (6/4 + 2/8) x 1 GiB = 1792 MiB over its NVLink at
    # 18 x 20.6 GB/s, 5.07 ms at the least. Pipelined in NCCL's 512 KiB chunks the tree stays within 1.6x of that;
    # run in dataflow alone (every chunk at once, sharing the links) it took 19.8 ms.
    run = simulate_nccl("allreduce", from_spec("dgx-h100:8"), 1 << 30, algo="tree", proto="Simple")
    floor = 1792 * 2**20 / (18 * 20.6e9)
    assert floor <= run.time <= 1.6 * floor
