"""Reading and writing the files a user names, safely: reads capped in bytes, writes that replace only regular files.

Reads. A file's reported size says nothing of ``/dev/zero``, a FIFO or ``/proc`` (0 bytes each), so
``read_capped`` reads at most ``limit + 1`` bytes whatever the size says, and refuses the file once it
holds more than ``limit``. Directories are refused by name.

Writes. ``write_output`` never renames over anything but a regular file:

- ``-`` writes to standard output;
- a path that resolves (through symbolic links) to a FIFO, a character or block device or a socket is
  opened and written to, as the shell's ``>`` would: ``/dev/full`` gives "No space left on device", and
  ``/dev/null`` swallows the output; neither is replaced by a regular file;
- a regular file, or a path that does not exist yet, is written into a temporary file created
  exclusively (``mkstemp``: ``O_CREAT | O_EXCL``, a fresh random name, mode 0600) in the target's own
  directory, then renamed over the target. A planted ``<target>.tmp`` symbolic link is never followed,
  since that name is never used; an existing file keeps its permission bits, a new one gets the
  umask's. A symbolic link named as the target is written through: its target is replaced, the link kept.

Errors are ``CollschedError``s (or the subclass the caller names) naming the file.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from algorithms.errors import CollschedError

__all__ = ["read_capped", "write_output"]

_CHUNK = 1 << 20


def read_capped(path: str | os.PathLike[str], limit: int, what: str = "",
                error: type[CollschedError] = CollschedError) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them; ``error`` naming the file when it holds more, is a
    directory or cannot be read. ``what`` (e.g. ``"topology file "``) prefixes the file's name."""
    name = f"{what}{os.fspath(path)}"
    try:
        with open(path, "rb") as f:
            if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
                raise error(f"{name}: cannot read: is a directory")
            parts, total = [], 0
            while total <= limit:
                part = f.read(min(_CHUNK, limit + 1 - total))
                if not part:
                    break
                parts.append(part)
                total += len(part)
    except IsADirectoryError:
        raise error(f"{name}: cannot read: is a directory") from None
    except OSError as e:
        raise error(f"{name}: cannot read: {e.strerror or e}") from None
    if total > limit:
        raise error(f"{name}: more than {limit} bytes, over the limit of {limit} for this kind of file")
    return b"".join(parts)


def write_output(path: str | os.PathLike[str], data: str | bytes,
                 error: type[CollschedError] = CollschedError) -> None:
    """Write ``data`` (text is UTF-8) to ``path`` as the module docstring says; ``error`` naming the file."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if os.fspath(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        return
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise error(f"cannot write {path}: {e.strerror or e}") from None
    try:
        if mode is not None and stat.S_ISDIR(mode):
            raise error(f"cannot write {path}: is a directory")
        if mode is not None and not stat.S_ISREG(mode):
            with open(target, "wb") as f:  # a FIFO or a device: written to, never replaced
                f.write(raw)
            return
        _replace(target, raw, None if mode is None else stat.S_IMODE(mode))
    except OSError as e:
        raise error(f"cannot write {path}: {e.strerror or e}") from None


def _replace(target: Path, raw: bytes, mode: int | None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
