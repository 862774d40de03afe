"""DTensor, DeviceMesh and tensor parallelism on the ``collsched`` backend, against the same steps on gloo.

A 2x2 mesh (data parallel x tensor parallel) of collsched groups trains a small MLP with tensor parallelism
(``parallelize_module``: column-wise then row-wise) inside FSDP2 (``fully_shard`` over the data-parallel
dimension); the same steps run on a mesh of gloo groups over the same ranks. Every collective here reduces
two values, whose sum does not depend on the order, so losses and parameters must be bitwise equal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.runners import backend_cases as cases
from tests.runners import limits

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())  # the repository
MESH = ((0, 1), (2, 3))  # rows: data-parallel replicas; columns: tensor-parallel peers


def _mesh(backend: str, rank: int) -> Any:
    """A 2x2 DeviceMesh ("dp", "tp") whose groups are new groups of ``backend``."""
    from torch.distributed.device_mesh import DeviceMesh

    groups = {}
    for dim, sets in (("tp", MESH), ("dp", tuple(zip(*MESH, strict=True)))):
        for ranks in sets:  # every rank makes every group, in the same order
            g = dist.new_group(list(ranks), backend=backend)
            if rank in ranks:
                groups[dim] = g
    return DeviceMesh.from_group([groups["dp"], groups["tp"]], "cpu", mesh=torch.tensor(MESH),
                                 mesh_dim_names=("dp", "tp"))


def _train(mesh: Any, rank: int) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    replica = rank // 2  # the row of the mesh: tensor-parallel peers see the same batch
    for step in range(3):
        g = torch.Generator().manual_seed(100 * step + replica)
        x, y = torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    params = [p.full_tensor().detach().clone() for p in model.parameters()]  # type: ignore[attr-defined]
    # A DTensor redistributed by hand: sharded rows of the whole mesh, gathered back.
    whole = torch.arange(32.0).reshape(8, 4)
    shards = distribute_tensor(whole, mesh, [Shard(0), Shard(1)])
    return losses, params, shards.redistribute(mesh, [Replicate(), Replicate()]).to_local()


def tp_fsdp_training(rank: int, world: int) -> None:
    """Three steps of TP inside FSDP2 on a 2x2 collsched mesh equal the same steps on gloo, bit for bit."""
    from runners.backend.group import collsched_group

    c = cases.Checker(rank)
    mesh = _mesh("collsched", rank)
    got = _train(mesh, rank)
    want = _train(_mesh("gloo", rank), rank)
    for name, a, b in (("loss", got[0], want[0]), ("parameter", got[1], want[1])):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            c.run(f"{name} {i}", lambda x=x, y=y: None if torch.equal(x, y) else (_ for _ in ()).throw(
                AssertionError(f"{x.flatten()[:4].tolist()} != {y.flatten()[:4].tolist()}")))
    c.run("redistributed DTensor", lambda: None if torch.equal(got[2], torch.arange(32.0).reshape(8, 4))
          else (_ for _ in ()).throw(AssertionError(f"{got[2].tolist()}")))
    ran = {dim: dict(collsched_group(mesh.get_group(dim)).executed) for dim in ("dp", "tp")}  # type: ignore[union-attr]
    if not any(ran["tp"].values()) or not any(ran["dp"].values()):
        c.failures.append(f"rank {rank}: a mesh dimension ran no collsched schedule: {ran}")
    c.finish(least=8)


@pytest.mark.multiprocess
def test_tensor_parallel_inside_fsdp2_on_a_2x2_mesh_equals_gloo_bitwise() -> None:
    cases.spawn(tp_fsdp_training, 4)


@pytest.mark.multiprocess
def test_a_per_device_string_leaves_no_warning_at_destroy(tmp_path: Path) -> None:
    # torch compares a plugin's upper-case key with the string's lower-case names, so "cpu:collsched" made a
    # group with no default backend, and destroy_process_group warned "No backend of type 0 found".
    script = ("import os, torch, torch.distributed as dist\n"
              "import runners.backend\n"
              "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=os.environ['PORT'])\n"
              "dist.init_process_group('cpu:collsched', rank=0, world_size=1)\n"
              "t = torch.ones(4); dist.all_reduce(t); print(t.sum().item())\n"
              "dist.destroy_process_group()\n")
    env = {**os.environ, "PORT": str(cases.free_port()), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=limits.job(0.4))
    assert out.returncode == 0 and out.stdout.split() == ["4.0"], out.stderr[-2000:]
    assert "No backend of type" not in out.stderr, out.stderr[-2000:]
