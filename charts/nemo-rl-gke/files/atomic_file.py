"""Files on the shared volume written whole or not at all, for the chart's programs (the
preparation Job's marker, datasets and check verdict; the launcher's run outcome).

A temporary file in the same folder is written, flushed and synced, then renamed over the target,
and the folder is synced so that the rename survives a crash: a reader, in this pod or another,
sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable


def write_lines(path: str, lines: Iterable[str]) -> int:
    """Write each line (with its newline) to `path` atomically, making its folder; the line count."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
                count += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return count
