"""Correctness: what a schedule means and whether it does what its collective promises.

- ``semantics``: symbolic slot contents, the slot layout, the write rule, initial state, postconditions;
- ``verifier``: lockstep symbolic execution, ``verify`` and the location of wrong slots; ``assert_verified``
  for tests (an ``AssertionError`` that names the schedule and lists what is wrong);
- ``fast``: the verifier's semantics on compact columns, for tens of millions of transfers;
- ``report``: ``Violation`` and ``VerifyReport``, what both verifiers return;
- ``dataflow``: the dataflow graph of a schedule and its execution in any order it allows;
- ``mutation``: mutation testing of the verifier (does it catch a broken schedule?);
- ``strategies``: hypothesis strategies and the ``settings`` profile for users' property tests.

>>> from algorithms import build
>>> verify(build("allreduce", "ring", 8)).ok
True
"""

from sim.verify.report import VerifyReport, Violation
from sim.verify.verifier import assert_verified, verify

__all__ = ["Violation", "VerifyReport", "assert_verified", "verify"]
