"""Staging memory for received chunks: one buffer per device kept between runs, carved per run.

Memory. Beyond the caller's tensors, one run allocates at most:
scratch ``scratch_chunks·S``; staging for receives ``budget_chunks·S`` (at most
twice the most chunks this rank stages in one step; for ring all-reduce
``2·N/p``); snapshots of local transfers that a same-step write would
clobber; a copy of the input when an out-of-place schedule writes it; and,
when C does not divide N, padded copies of the input and output. All of it is
released when ``run`` returns, except the staging buffer: one per device, as
large as the largest staging bound seen, kept between runs and carved into
each run's staged receives (fresh large buffers cost a page fault per page;
``release_memory()`` frees it). A receive that finds it fragmented, or a run
that finds it lent to another thread's run, gets fresh memory instead, so
staging never exceeds that buffer plus ``budget_chunks·S``. On nccl staging is not budgeted:
a step's staged receives are allocated when the step is issued and freed
after its applies (the caching allocator reuses them).
"""

from __future__ import annotations

import threading

import torch

from algorithms.ir import Schedule
from runners.execution.plan import rank_plan
from runners.execution.switching import on_torch

__all__ = ["STAGING", "Arena", "Carver", "release_memory", "staging_bytes"]


class Arena:
    """Staging memory kept between runs: one byte buffer per device, lent to one run at a time.

    Fresh large buffers cost a page fault per page (malloc maps them and
    unmaps them when freed), and a training loop all-reduces buckets of a few
    sizes over and over; so the runner keeps one buffer per device, as large as
    the largest staging bound seen, and carves each run's staged receives out
    of it (``Carver``). A run that finds the buffer lent (another thread's run,
    e.g. two groups of the collsched backend) gets private memory instead.
    ``release_memory()`` frees it.
    """

    def __init__(self) -> None:
        self.buffers: dict[torch.device, torch.Tensor] = {}
        self.lent: set[torch.device] = set()
        self.lock = threading.Lock()

    def borrow(self, nbytes: int, device: torch.device) -> tuple[torch.Tensor, bool]:
        """A byte buffer of at least ``nbytes``, and whether it is the shared one (give it back)."""
        with self.lock:
            if device in self.lent:
                return torch.empty(nbytes, dtype=torch.uint8, device=device), False
            buf = self.buffers.get(device)
            if buf is None or buf.numel() < nbytes:
                self.buffers.pop(device, None)  # free the old one before allocating the larger
                buf = self.buffers[device] = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.lent.add(device)
            return buf, True

    def give_back(self, device: torch.device, keep: bool = True) -> None:
        with self.lock:
            self.lent.discard(device)
            if not keep:
                self.buffers.pop(device, None)

    def clear(self) -> None:
        with self.lock:
            for device in list(self.buffers):
                if device not in self.lent:
                    del self.buffers[device]


STAGING = Arena()


class Carver:
    """First-fit allocation of contiguous chunk slots from a run's staging buffer.

    The engine never has more than ``units`` chunks staged at once (the plan's
    budget), but slots are freed out of order, so a request can find the free
    space fragmented; it then gets fresh memory (correct, just not reused).
    """

    def __init__(self, buffer: torch.Tensor, unit: int, units: int, dtype: torch.dtype) -> None:
        self.buffer = buffer
        self.unit = unit  # bytes per chunk slot
        self.dtype = dtype
        self.free: list[list[int]] = [[0, units]] if units else []  # sorted [start, length] runs

    def take(self, count: int) -> tuple[torch.Tensor, int]:
        """A staging tensor of ``count`` chunks and its slot (-1: fresh memory, nothing to give back)."""
        for k, (start, length) in enumerate(self.free):
            if length >= count:
                if length == count:
                    del self.free[k]
                else:
                    self.free[k] = [start + count, length - count]
                view = self.buffer[start * self.unit:(start + count) * self.unit]
                return view.view(self.dtype), start
        return torch.empty(count * self.unit, dtype=torch.uint8, device=self.buffer.device).view(self.dtype), -1

    def give(self, start: int, count: int) -> None:
        if start < 0:
            return
        free = self.free
        k = 0
        while k < len(free) and free[k][0] < start:
            k += 1
        free.insert(k, [start, count])
        if k + 1 < len(free) and start + count == free[k + 1][0]:  # merge with the next run
            free[k][1] += free.pop(k + 1)[1]
        if k > 0 and free[k - 1][0] + free[k - 1][1] == start:  # and with the previous one
            free[k - 1][1] += free.pop(k)[1]


def release_memory() -> None:
    """Free the staging memory the runner keeps between runs."""
    STAGING.clear()


def staging_bytes(schedule: Schedule, rank: int, n: int, dtype: torch.dtype) -> int:
    """The most bytes of staged receives rank ``rank`` holds at once for ``n`` elements per rank."""
    plan = rank_plan(on_torch(schedule), rank)  # what the runner executes: switch operations lowered
    s = -(-n // schedule.collective.chunks)
    return plan.budget_chunks * s * torch.empty(0, dtype=dtype).element_size()
