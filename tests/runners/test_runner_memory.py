"""The runner's staging memory: slots carved from a buffer kept between runs (runners.execution.runner)."""

from __future__ import annotations

import torch

from runners.execution.staging import Arena, Carver


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def test_slots_are_disjoint_views_of_the_buffer_in_the_dtype() -> None:
    buf = torch.empty(4 * 12, dtype=torch.uint8)
    carver = Carver(buf, unit=12, units=4, dtype=torch.float32)  # chunks of 3 floats
    a, sa = carver.take(1)
    b, sb = carver.take(2)
    c, sc = carver.take(1)
    assert (sa, sb, sc) == (0, 1, 3)
    assert (a.dtype, a.numel(), b.numel(), c.numel()) == (torch.float32, 3, 6, 3)
    views = [a, b, c]
    assert all(v.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr() for v in views)
    assert not any(_overlaps(x, y) for i, x in enumerate(views) for y in views[i + 1:])
    a.fill_(1)
    b.fill_(2)
    c.fill_(3)
    assert buf.view(torch.float32).tolist() == [1.0] * 3 + [2.0] * 6 + [3.0] * 3


def test_freed_slots_merge_and_fragmentation_falls_back_to_fresh_memory() -> None:
    buf = torch.empty(4 * 8, dtype=torch.uint8)
    carver = Carver(buf, unit=8, units=4, dtype=torch.int64)
    slots = [carver.take(1)[1] for _ in range(4)]
    assert slots == [0, 1, 2, 3]
    carver.give(0, 1)
    carver.give(2, 1)
    fresh, slot = carver.take(2)  # two free chunks, not contiguous
    assert slot == -1 and fresh.numel() == 2
    assert fresh.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
    carver.give(slot, 2)  # fresh memory is not the carver's: nothing changes
    carver.give(1, 1)  # 0, 1 and 2 merge into one run
    whole, slot = carver.take(3)
    assert slot == 0 and whole.numel() == 3
    assert whole.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    carver.give(3, 1)
    carver.give(0, 3)
    assert carver.free == [[0, 4]]


def test_the_arena_is_lent_to_one_run_at_a_time_and_dropped_after_a_failure() -> None:
    arena = Arena()
    cpu = torch.device("cpu")
    first, shared = arena.borrow(64, cpu)
    assert shared and first.numel() == 64
    other, shared2 = arena.borrow(32, cpu)  # lent: a concurrent run gets private memory
    assert not shared2 and other.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    arena.give_back(cpu)
    again, shared = arena.borrow(16, cpu)  # kept between runs, large enough
    assert shared and again.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    arena.give_back(cpu, keep=False)  # a failed run may leave receives posted into it
    fresh, shared = arena.borrow(16, cpu)
    assert shared and fresh.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    arena.give_back(cpu)
    bigger, _ = arena.borrow(128, cpu)
    assert bigger.numel() == 128
    arena.give_back(cpu)
    arena.clear()
    assert not arena.buffers
