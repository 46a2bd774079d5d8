"""Reading and writing values files: safe loading, commented output, atomic writes."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import yaml

from generator.core.errors import InputError
from generator.core.schema import description

MAX_BYTES = 1 << 20  # a values file is a few KiB; refuse anything near a YAML bomb
MAX_NODES = 100_000
COMMENT_WIDTH = 96


def _count_nodes(doc: Any, limit: int, source: str) -> int:
    stack, seen = [doc], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            raise InputError(f"{source}: document has more than {limit} nodes (YAML alias expansion?)")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return seen


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"key {key!r} is given twice")
        self.key, self.first, self.second = key, first, second


class _UniqueKeys:
    """PyYAML's safe constructor, refusing a mapping that names one key twice: PyYAML and Helm keep
    the last and drop the first without a word (a second `storage:` block pasted below the
    generated one). A key repeated through a `<<` merge is an override, as YAML means it."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKeyError(key, seen[key], line)
                seen[key] = line
            except TypeError:  # an unhashable key: the constructor below reports it
                break
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """The pure-Python parser: its messages are the ones users see for a file that is not YAML."""


class _FastUniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser (PyYAML's CSafeLoader) with the same constructor: the same document, several
    times faster. Anything it refuses is parsed again by _UniqueKeyLoader for PyYAML's message."""


def parse_yaml(text: str, source: str) -> Any:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise InputError(f"{source}: larger than {MAX_BYTES // 1024} KiB; not a values file")
    try:
        try:
            doc = yaml.load(text, Loader=_FastUniqueKeyLoader)  # noqa: S506 - a safe loader
        except (yaml.YAMLError, RecursionError, ValueError):
            doc = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a safe loader
    except DuplicateKeyError as e:
        raise InputError(
            f"{source}: line {e.second}: key {e.key!r} is given twice (lines {e.first} and {e.second}); "
            "YAML and Helm keep only the last, so the first is lost - merge the two into one"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{source}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: YAML nested too deeply") from None
    _count_nodes(doc, MAX_NODES, source)
    return {} if doc is None else doc


def _kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_up_to(fd: int, n: int) -> bytes:
    """At most n bytes from fd (fewer at end of file)."""
    chunks, size = [], 0
    while size < n:
        chunk = os.read(fd, n - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_limited(path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the regular file `path` (one more than allowed shows it is too
    large). Refuses anything else without reading it: a FIFO, a device, a directory."""
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a directory, not a values file")
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: is {_kind(mode)}, not a values file; give a regular file")
        return _read_up_to(fd, limit + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)


def load_values(path: Path) -> Any:
    """The one input policy of every command that reads a values file: a regular file of at most
    MAX_BYTES, UTF-8, YAML without duplicate keys or alias bombs, and not empty. Each refusal is
    one line naming the file."""
    raw = read_limited(path, MAX_BYTES)
    if len(raw) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // 1024} KiB; not a values file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    doc = parse_yaml(text, str(path))
    if doc == {} and not _sets_empty_mapping(text):
        raise InputError(
            f"{path}: is empty (no values in it); give the values file you meant (python -m generator writes one), "
            "or write {} in it to set nothing"
        )
    return doc


def _sets_empty_mapping(text: str) -> bool:
    """Whether a document that parsed to {} says so (`{}`), rather than being empty, comments or null."""
    return yaml.safe_load(text) == {}


# --- writing ------------------------------------------------------------------------------


def _comment(text: str, indent: int) -> str:
    width = max(40, COMMENT_WIDTH - indent)
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False))


def _item_fields(path: tuple[str | int, ...], item: dict[str, Any]) -> str:
    """One comment line per field of a list entry (comments inside entries would break the
    `- key: value` layout)."""
    parts = []
    for key in item:
        text = description((*path, 0, key))
        if text:
            parts.append(f"{key}: {text}")
    return "\n".join(parts)


def _commented(node: Any, path: tuple[str | int, ...], indent: int, with_comments: bool = True) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(node, dict):
        cm = CommentedMap()
        for key, value in node.items():
            cm[key] = _commented(value, (*path, key), indent + 2, with_comments)
            if not with_comments or "resources" in path:
                continue
            text = description((*path, key))
            if isinstance(value, list) and value and isinstance(value[0], dict):
                fields = _item_fields((*path, key), value[0])
                text = f"{text}\nEach entry:\n{fields}" if text else fields
            if text:
                lines = [_comment(t, indent) for t in text.split("\n")]
                cm.yaml_set_comment_before_after_key(key, before="\n".join(lines), indent=indent)
        return cm
    if isinstance(node, list):
        seq = CommentedSeq()
        for i, item in enumerate(node):
            seq.append(_commented(item, (*path, i), indent + 2, with_comments=False))
        return seq
    if isinstance(node, str) and "\n" in node:
        return LiteralScalarString(node)
    return node


def dump_values(values: dict[str, Any], header: str) -> str:
    """YAML text of `values` with each key's schema description as a comment above it."""
    from ruamel.yaml import YAML

    y = YAML()
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    doc = _commented(values, (), 0)
    buf = io.StringIO()
    y.dump(doc, buf)
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return lines + "\n" + buf.getvalue()


def _cannot_write(path: Path, e: OSError) -> InputError:
    return InputError(f"{path}: cannot write: {e.strerror or e}")


def _write_target(path: Path, force: bool) -> tuple[Path, os.stat_result | None]:
    """The file that writing `path` replaces (a symlink's target: the link stays) and its
    current status, or None when it does not exist yet. Refuses what must not be replaced."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path, None
    except OSError as e:
        raise _cannot_write(path, e) from None
    if stat.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(path))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            # A dangling link is something the user put there: only --force writes its target.
            if not force:
                raise InputError(
                    f"{path}: is a symlink to {target}, which does not exist; use --force to create it or -o to write elsewhere"
                ) from None
            return target, None
        except OSError as e:
            raise _cannot_write(path, e) from None
    else:
        target = path
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory; give a file name with -o")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: is {_kind(st.st_mode)}, not a regular file; give a file name with -o")
    return target, st


def _same_content(path: Path, data: bytes) -> bool:
    """Whether the regular file `path` holds exactly `data`; reads at most len(data) + 1 bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return _read_up_to(fd, len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, force: bool) -> str:
    """Write `text` to `path` atomically. Returns 'written' or 'unchanged'.

    An existing file with other content is only replaced with force=True; it keeps its
    permission bits. A symlink is written through: its target is the file replaced (a dangling
    link needs force=True). Anything but a regular file (device, FIFO, socket, directory) is
    refused and never read. Errors are InputError with one line naming `path`.
    """
    data = text.encode("utf-8")
    target, st = _write_target(path, force)
    if st is not None:
        if _same_content(target, data):
            return "unchanged"
        if not force:
            raise InputError(f"{path}: exists and differs; use --force to overwrite it or -o to write elsewhere")
    directory = target.parent if str(target.parent) else Path(".")
    try:
        if not directory.is_dir():
            raise InputError(f"{directory}: no such directory")
    except OSError as e:
        raise _cannot_write(path, e) from None
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
    tmp: str | None = None
    try:
        # A short temp name: a legal 250-byte file name plus a prefix would exceed NAME_MAX.
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise _cannot_write(path, e) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return "written"
