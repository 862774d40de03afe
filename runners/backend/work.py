"""What a collsched collective returns (``CollschedWork``) and the queue that runs a group's collectives.

Every collective becomes a job on its group's one worker thread, a FIFO: collectives complete in
the order they were issued. See ``runners.backend.group`` for ordering, errors and CUDA streams.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["CollschedWork", "InlineQueue", "IssueQueue", "Job", "JobState"]

Job = Callable[[], Any]


def _unwrap(fut: torch.futures.Future[Any]) -> Any:
    return fut.value()  # raises the job's error: the chained future then fails in C++ too


@dataclass
class JobState:
    """What one queued collective left behind: finished or not, its error, its CUDA completion event.

    ``future`` is what ``get_future()`` hands out. It is chained on ``outcome``
    (which the worker completes) so that a failed job fails it *in C++*:
    ``torch.futures.Future.set_exception`` only stores the exception as the
    result with a Python-side unwrap function, so C++ readers (DDP's reducer,
    ``parseCppCommHookResult``) saw a successful future holding no tensors and
    indexed past the end (the SIGSEGV of DDP + a failing collective, e.g. a
    sparse gradient all-reduce). An exception raised in a ``then`` callback is
    a real C++ error: ``value()`` throws there and Python gets a RuntimeError.
    """

    outcome: torch.futures.Future[Any] = field(default_factory=torch.futures.Future)
    future: torch.futures.Future[Any] = field(init=False)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    cuda_done: Any = None

    def __post_init__(self) -> None:
        self.future = self.outcome.then(_unwrap)


class CollschedWork(dist.Work):
    """A collective issued on a collsched group; ``wait()`` raises if it failed."""

    def __init__(self, state: JobState, what: str, issue_queue: IssueQueue | None = None) -> None:
        super().__init__()
        self._state = state
        self._what = what
        self._queue = issue_queue

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """Block until the collective has run; raise its error; make the current CUDA stream wait for it."""
        seconds = timeout.total_seconds() if timeout else 0.0
        deadline = time.monotonic() + seconds if seconds > 0 else math.inf
        if not self._state.done.is_set() and self._queue is not None and self._queue.on_worker():
            self._queue.run_until(self._state, deadline)
        if not self._state.done.wait(seconds if seconds > 0 else None):
            raise TimeoutError(f"collsched {self._what} did not complete within {timeout}")
        if self._state.error is not None:
            raise self._state.error
        if self._state.cuda_done is not None:
            torch.cuda.current_stream().wait_event(self._state.cuda_done)
        return True

    def is_completed(self) -> bool:
        """True once the collective has finished, successfully or not (for CUDA: its kernels too)."""
        if not self._state.done.is_set():
            return False
        event = self._state.cuda_done
        return event is None or self._state.error is not None or bool(event.query())

    def is_success(self) -> bool:
        """True once the collective has finished without an error."""
        return self._state.done.is_set() and self._state.error is None

    def exception(self) -> BaseException | None:
        """The collective's error, or None."""
        return self._state.error

    def get_future(self) -> torch.futures.Future[Any]:
        """A future completed with the collective's output tensors, or with its error."""
        return self._state.future

    def result(self) -> list[torch.Tensor]:
        """The output tensors, after waiting."""
        self.wait()
        value = self._state.future.value()
        return list(value) if isinstance(value, (list, tuple)) else [value]

    def synchronize(self) -> None:
        """Same as ``wait()``."""
        self.wait()

    def __repr__(self) -> str:
        status = "pending" if not self._state.done.is_set() else ("failed" if self._state.error else "done")
        return f"CollschedWork({self._what}, {status})"


class IssueQueue:
    """One worker thread running a group's collectives one at a time, in issue order."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Job, JobState] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, job: Job, state: JobState) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"collsched group {self._name} has been shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"collsched-{self._name}", daemon=True)
                self._thread.start()
            self._jobs.put((job, state))

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            self._execute(*item)

    @staticmethod
    def _execute(job: Job, state: JobState) -> None:
        try:
            value = job()
        except BaseException as err:  # every failure belongs to the caller's wait()
            state.error = err
            state.done.set()
            state.outcome.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            return
        state.done.set()
        state.outcome.set_result(value)  # runs the future's callbacks, on this thread

    def on_worker(self) -> bool:
        """True on the worker thread itself, e.g. inside a callback chained on a collective's future."""
        return threading.current_thread() is self._thread

    def run_until(self, state: JobState, deadline: float = math.inf) -> None:
        """On the worker thread, run queued jobs inline, in order, until ``state``'s job is done, or until
        ``deadline`` (``time.monotonic()``) has passed, checked between jobs (a job running is bounded by its
        own collective's time limit); the caller's wait then times out.

        A callback chained with ``get_future().then(...)`` runs on the worker
        thread; if it waits for a collective it issued itself, the worker
        must run that collective or it would wait for itself forever.
        """
        while not state.done.is_set() and time.monotonic() < deadline:
            item = self._jobs.get()
            if item is None:
                self._jobs.put(None)
                raise RuntimeError(f"collsched group {self._name} was shut down while a collective was waited on")
            self._execute(*item)

    def close(self, timeout: float) -> bool:
        """Let queued jobs finish (up to ``timeout`` seconds) and stop the thread; False if it did not stop."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            thread = self._thread
        if thread is None:
            return True
        self._jobs.put(None)
        thread.join(timeout)
        return not thread.is_alive()


class InlineQueue(IssueQueue):
    """Runs each job at once, on the thread that submits it: the C++ backend's worker (runners.backend.cpp),
    which already keeps the group's collectives in issue order."""

    def submit(self, job: Job, state: JobState) -> None:
        if self._closed:
            raise RuntimeError(f"collsched group {self._name} has been shut down")
        self._execute(job, state)

    def on_worker(self) -> bool:
        return False

    def close(self, timeout: float) -> bool:
        self._closed = True
        return True
