# ruff: noqa: E501  (the driver below is a program text, kept as it was run)
"""Generate the held-out MSCCL++ plan corpus: run the DSL programs of microsoft/mscclpp@1f5f065 unmodified.

    python tests/data/mscclpp_heldout/generate.py SRC STUB WORK

SRC: a ``git archive`` of that commit; STUB: a directory holding a package ``mscclpp/`` whose ``__init__.py`` is
empty and whose ``language/``, ``default_algos/`` and ``__main__.py`` are SRC's ``python/mscclpp/`` files (SOURCES.md
says why); WORK: where the plans (``WORK/plans``), the install cache and ``gen_log.json`` go. Needs
``sortedcontainers``. This is how the 139 plans ``benchmarks/bench_mscclpp_corpus.py`` was run on were made; the
subset kept beside this script was copied from WORK/plans.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

SRC, STUB, WORK = (Path(a) for a in sys.argv[1:4])
OUT = WORK / "plans"
OUT.mkdir(parents=True, exist_ok=True)
T = "python/mscclpp/language/tests"
ENV = {**os.environ, "PYTHONPATH": str(STUB)}
PY = sys.executable
jobs = []  # (file name, program path, args)


def add(name, prog, *args):
    jobs.append((name, prog, list(args)))


for n in (8, 16, 32):
    for prog in [
        "allgather_nvls_zero_copy",
        "allgather_nvls_zero_copy_pkt",
        "allgather_pkt",
        "allgather_pkt_rppkt",
        "allreduce",
        "allreduce_naivy",
        "allreduce_nvls_zero_copy",
        "allreduce_pkt",
    ]:
        extra = ["--instances", "1"] if prog == "allgather_nvls_zero_copy" else []
        add(f"{prog}_{n}gpu", f"{T}/single_node/{prog}.py", "--name", prog.split("_")[0], "--num_gpus", str(n), *extra)
    for prog in ["alltoall", "alltoall_pipeline", "alltoall_ring", "alltoall_ring_oop", "alltoall_ring_peers"]:
        add(f"{prog}_{n}gpu", f"{T}/single_node/alltoall/{prog}.py", "--name", "alltoall", "--num_gpus", str(n))
    add(
        f"reduce_nvls_{n}gpu", "test/executor-tests/algos/reduce_nvls.py", "--name", "reduce_nvls", "--num_gpus", str(n)
    )
    add(
        f"reduce_nvls_pipeline_{n}gpu",
        "test/executor-tests/algos/reduce_nvls_pipeline.py",
        "--name",
        "reduce_nvls_pipeline",
        "--num_gpus",
        str(n),
    )
add(
    "allgather_nvls_zero_copy_8gpu_i8",
    f"{T}/single_node/allgather_nvls_zero_copy.py",
    "--name",
    "allgather",
    "--num_gpus",
    "8",
)
for g in (2, 4, 8, 16):
    for prog in ["allgather", "allgather_pkt", "reducescatter", "reducescatter_pkt"]:
        add(f"mn_{prog}_2x{g}", f"{T}/multi_node/{prog}.py", "--name", prog.split("_")[0], "--gpus_per_node", str(g))
for n, g, t in [(8, 4, 2), (16, 8, 2), (16, 8, 4), (32, 8, 4)]:
    add(
        f"mn_allgather_tbg_{n}_{g}_tbg{t}",
        f"{T}/multi_node/allgather_tbg.py",
        "--name",
        "allgather",
        "--num_gpus",
        str(n),
        "--gpus_per_node",
        str(g),
        "--tbg_size",
        str(t),
    )
for nn, g, m in [(2, 8, "0x0"), (2, 8, "0x3"), (4, 8, "0x7"), (2, 4, "0x1")]:
    add(
        f"mn_sendrecv_{nn}x{g}_mask{m}",
        f"{T}/multi_node/send_recv.py",
        "--name",
        "sendrecv",
        "--nnodes",
        str(nn),
        "--gpus_per_node",
        str(g),
        "--split_mask",
        m,
    )
for n, g in [(16, 8), (32, 8), (8, 4), (4, 2)]:
    add(
        f"default_allgather_multi_nodes_{n}_{g}",
        "python/mscclpp/default_algos/allgather_multi_nodes.py",
        "--name",
        "allgather",
        "--num_gpus",
        str(n),
        "--gpus_per_node",
        str(g),
    )
    add(
        f"default_allgather_multi_nodes_{n}_{g}_inplace",
        "python/mscclpp/default_algos/allgather_multi_nodes.py",
        "--name",
        "allgather",
        "--num_gpus",
        str(n),
        "--gpus_per_node",
        str(g),
        "--in_place",
    )
    for tbg in (1, 4):
        add(
            f"default_allreduce_multi_nodes_{n}_{g}_tbg{tbg}",
            "python/mscclpp/default_algos/allreduce_multi_nodes.py",
            "--name",
            "allreduce",
            "--num_gpus",
            str(n),
            "--gpus_per_node",
            str(g),
            "--tbg",
            str(tbg),
        )
for f in sorted((SRC / T / "unit_tests").rglob("*.py")):
    add("unit_" + f.stem, str(f.relative_to(SRC)))
for f in ["reduce", "reduce_pack", "reduce_pack_tbg", "reduce_tbg", "transfer_pack", "transfer_pack_tbg"]:
    add(f"executor_{f}_2gpu", f"test/executor-tests/algos/{f}.py", "--name", f)

log = []


def record(name, how, ok, err=""):
    log.append({"file": name + ".json", "how": how, "ok": ok, "error": err[-300:]})


for name, prog, args in jobs:
    r = subprocess.run([PY, str(SRC / prog), *args], env=ENV, capture_output=True, text=True, cwd=str(WORK))
    how = f"{prog} {' '.join(args)}".strip()
    if r.returncode == 0 and r.stdout.strip():
        try:
            obj = json.loads(r.stdout)
        except json.JSONDecodeError as e:
            record(name, how, False, f"not JSON: {e}")
            continue
        (OUT / f"{name}.json").write_text(json.dumps(obj, separators=(",", ":")))
        record(name, how, True)
    else:
        record(
            name, how, False, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}, no output"
        )

# Defaults installed by `python -m mscclpp --install`
cache = WORK / "cache"
cache.mkdir(exist_ok=True)
r = subprocess.run(
    [PY, "-m", "mscclpp", "--install"],
    env={**ENV, "MSCCLPP_CACHE_DIR": str(cache)},
    capture_output=True,
    text=True,
    cwd=str(WORK),
)
print("install:", r.returncode, r.stdout[-500:], r.stderr[-500:])
for f in sorted((cache / "default").glob("*.json")):
    obj = json.loads(f.read_text())
    (OUT / f"shipped_default_{f.stem}.json").write_text(json.dumps(obj, separators=(",", ":")))
    record(f"shipped_default_{f.stem}", "python -m mscclpp --install (MSCCLPP_CACHE_DIR)", True)

# Functions without a command line: reducescatter_multi_nodes with the shipped all-reduce AlgoSpec fields; the torch example's allreduce_nvls.
drv = r"""
import sys, json, ast
from mscclpp.language.collectives import *
from mscclpp.language.utils import AlgoSpec
kind, n, g, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if kind == "rs":
    from mscclpp.default_algos.reducescatter_multi_nodes import reducescatter_multi_nodes
    spec = AlgoSpec(name="reducescatter", collective=ReduceScatter(n, 1, True), nranks_per_node=g, world_size=n, in_place=True,
                    instances=1, protocol="LL", auto_sync=False, num_threads_per_block=1024, reuse_resources=True,
                    use_double_scratch_buffer=True, min_message_size=1 << 10, max_message_size=64 << 10, tags={"default": 1})
    print(reducescatter_multi_nodes(spec, extra).to_json())
else:
    src = open(sys.argv[5]).read(); tree = ast.parse(src)
    fn = [n_ for n_ in tree.body if isinstance(n_, ast.FunctionDef) and n_.name == "allreduce_nvls"][0]
    imports = [n_ for n_ in tree.body if isinstance(n_, (ast.Import, ast.ImportFrom)) and "mscclpp" in ast.unparse(n_) and "ext" not in ast.unparse(n_)]
    ns = {}; exec(compile(ast.Module(body=[*imports, fn], type_ignores=[]), "dsl_with_nccl_api.py", "exec"), ns)
    spec = AlgoSpec(name="allreduce_nvls", collective=AllReduce(n, 1, True), nranks_per_node=g, world_size=n, in_place=True,
                    instances=extra, protocol="Simple", num_threads_per_block=1024, min_message_size=1 << 20, max_message_size=48 << 30, tags={"nvls": 1})
    print(ns["allreduce_nvls"](spec).to_json())
"""
(WORK / "driver.py").write_text(drv)
for name, a in [
    ("default_reducescatter_multi_nodes_2x8", ["rs", "16", "8", "1"]),
    ("default_reducescatter_multi_nodes_2x8_tbg4", ["rs", "16", "8", "4"]),
    ("default_reducescatter_multi_nodes_4x8", ["rs", "32", "8", "1"]),
    ("default_reducescatter_multi_nodes_2x2", ["rs", "4", "2", "1"]),
    ("default_reducescatter_multi_nodes_2x2_tbg2", ["rs", "4", "2", "2"]),
    (
        "torch_example_allreduce_nvls_8gpu",
        ["nvls", "8", "8", "2", str(SRC / "examples/torch-integration/dsl_with_nccl_api.py")],
    ),
]:
    r = subprocess.run([PY, str(WORK / "driver.py"), *a], env=ENV, capture_output=True, text=True, cwd=str(WORK))
    if r.returncode == 0:
        (OUT / f"{name}.json").write_text(json.dumps(json.loads(r.stdout), separators=(",", ":")))
        record(name, "driver.py " + " ".join(a[:4]), True)
    else:
        record(name, "driver.py " + " ".join(a[:4]), False, r.stderr.strip().splitlines()[-1])
(WORK / "gen_log.json").write_text(json.dumps(log, indent=1))
print(sum(x["ok"] for x in log), "of", len(log), "generated")
for x in log:
    if not x["ok"]:
        print("FAIL", x["file"], x["how"], "|", x["error"])
