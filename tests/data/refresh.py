"""Refresh the repository's copy of the test data from the folder it was copied from.

    python tests/data/refresh.py [--shared PATH] [--check]

The tests read their data from tests/data (see README.md beside this file). It was copied from the
``shared`` folder kept beside a checkout (``<checkout>/../shared``, or PATH): its ``published``,
``foreign/msccl`` and ``foreign/mscclpp`` folders, file for file. This script copies every file of those
folders that is new or whose bytes differ into the same place under tests/data, and prints each one it
copied. A file that is only in tests/data is named and kept (delete it by hand if upstream dropped it);
a folder absent from the source is named and skipped.

--check copies nothing: it prints what a refresh would copy and exits 1 if anything would change.
Exit status 2: the source folder does not exist.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # tests/data
ROOT = HERE.parent.parent  # the checkout
DEFAULT_SOURCE = ROOT.parent / "shared"
FOLDERS = ("published", "foreign/msccl", "foreign/mscclpp")


def refresh(source: Path, dest: Path = HERE, *, check: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Copy new or changed files of FOLDERS from ``source`` to ``dest``.

    Returns (copied, only in dest, folders absent from source), as paths relative to ``dest``; with
    ``check`` nothing is written and ``copied`` lists what would be.
    """
    copied: list[str] = []
    extra: list[str] = []
    absent: list[str] = []
    for folder in FOLDERS:
        src, dst = source / folder, dest / folder
        if not src.is_dir():
            absent.append(folder)
            continue
        names = {p.name for p in src.iterdir() if p.is_file()}
        for name in sorted(names):
            target = dst / name
            if target.is_file() and filecmp.cmp(src / name, target, shallow=False):
                continue
            copied.append(f"{folder}/{name}")
            if not check:
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / name, target)
        if dst.is_dir():
            extra.extend(f"{folder}/{p.name}" for p in sorted(dst.iterdir()) if p.is_file() and p.name not in names)
    return copied, extra, absent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SOURCE,
                        help=f"the folder to copy from (default {DEFAULT_SOURCE})")
    parser.add_argument("--check", action="store_true", help="copy nothing; exit 1 if a refresh would copy a file")
    args = parser.parse_args(argv)
    source: Path = args.shared
    if not source.is_dir():
        print(f"refresh: {source} does not exist", file=sys.stderr)
        return 2
    copied, extra, absent = refresh(source, check=args.check)
    verb = "would copy" if args.check else "copied"
    for name in copied:
        print(f"{verb} {name} ({(source / name).stat().st_size} bytes)")
    for name in extra:
        print(f"kept {name} (not in {source})")
    for folder in absent:
        print(f"skipped {folder} (no such folder in {source})")
    print(f"{len(copied)} file(s) {'to copy' if args.check else 'copied'} from {source} to {HERE}")
    return 1 if args.check and copied else 0


if __name__ == "__main__":
    sys.exit(main())
