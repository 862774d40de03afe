"""Schedule files of any format: ``collsched.schedule/1`` JSON, MSCCL-IR XML or an MSCCL++ execution plan.

``load``/``loads`` read MSCCL-IR XML when the content starts with ``<`` (whatever the file is called), an
MSCCL++ plan when the JSON opens like one (``mscclpp.looks_like_plan``) and collsched JSON otherwise;
``save`` writes XML for a name ending in ``.xml`` (any case) and JSON otherwise (plans:
``mscclpp.save_plan``).
"""

from __future__ import annotations

import os
from pathlib import Path

from algorithms.errors import ScheduleError
from algorithms.formats import msccl, mscclpp, schedule
from algorithms.formats.schedule import is_xml_path
from algorithms.ir import Schedule

__all__ = ["is_xml_path", "load", "loads", "save"]


def loads(text: str | bytes) -> Schedule:
    """A schedule from JSON, MSCCL++ plan JSON or MSCCL-IR XML text (an XML file whose ``coll`` is ``custom``
    is refused); each reader refuses text over ``MAX_FILE_BYTES``."""
    if msccl.looks_like_xml(text):
        return msccl.loads_msccl(text)
    if mscclpp.looks_like_plan(text):
        return mscclpp.loads_plan(text)
    return schedule.loads(text)


def load(path: str | os.PathLike[str]) -> Schedule:
    """Load a schedule file (JSON, or MSCCL-IR XML: a document that starts with ``<``, whatever its name).

    Too-large, unreadable or invalid files raise ``ScheduleError`` naming the file. An XML file
    whose ``coll`` is ``custom`` is refused (it has no postcondition); import it
    with ``msccl.load_msccl(path, allow_custom=True)`` to simulate it.

    >>> import tempfile, pathlib
    >>> from algorithms import build
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ring.xml"
    >>> save(build("allreduce", "ring", 4), path)
    >>> load(path).collective.describe()
    'allreduce p=4 C=4'
    """
    data = schedule.read_bytes(path)
    try:
        return loads(data)
    except ScheduleError as e:
        raise ScheduleError(f"{path}: {e}") from None


def save(s: Schedule, path: str | os.PathLike[str]) -> None:
    """Write the schedule as JSON, or as MSCCL-IR XML when the name ends in ``.xml``."""
    if is_xml_path(path):
        msccl.save_msccl(s, Path(path))
    else:
        schedule.save(s, path)
