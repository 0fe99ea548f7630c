"""Safe YAML reading for catalog files: size, depth and alias limits, duplicate keys, line lookup.

PyYAML's safe loader still accepts inputs that hurt a tool which reads user catalogs: alias
bombs, deep nesting, duplicate keys that silently overwrite each other, and dates that become
datetime objects. This module refuses all of them and keeps the node tree so that a validation
error can be pointed at a line. Parsing goes through libyaml (PyYAML's wheels bundle it): the
pure-Python parser is five times slower, too slow for large catalogs.
"""

from __future__ import annotations

import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.cyaml import CParser  # type: ignore[attr-defined]
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from nodeforge.errors import InputError

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32


class _Resolver(Resolver):
    """The YAML 1.1 resolver without timestamps: catalog dates and versions stay strings."""


_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


MAX_INT_DIGITS = 40


class _NumberError(ConstructorError):
    """A number JSON cannot carry; keeps its node so that the error can name the field."""

    def __init__(self, problem: str, node: ScalarNode) -> None:
        super().__init__(None, None, problem, node.start_mark)
        self.node = node


class _Constructor(SafeConstructor):
    """Strings for keys, no duplicate keys, and only numbers JSON can carry: the resolved vars
    are JSON, which has no infinity or NaN, and no catalog number needs 40 digits."""

    def construct_yaml_int(self, node: ScalarNode) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _NumberError(f"a {digits}-digit number is out of range", node)
        return int(super().construct_yaml_int(node))

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = float(super().construct_yaml_float(node))
        if not math.isfinite(value):
            raise _NumberError(f"'{node.value}' is not a finite number", node)
        return value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ConstructorError(
                    None, None, f"mapping key {key!r} is not a string", key_node.start_mark
                )
            if key in seen:
                raise ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Constructor.yaml_constructors = {
    **SafeConstructor.yaml_constructors,
    "tag:yaml.org,2002:int": _Constructor.construct_yaml_int,
    "tag:yaml.org,2002:float": _Constructor.construct_yaml_float,
}


class _Loader(CParser, _Constructor, _Resolver):
    """libyaml's parser and composer (fast, with its own nesting limit), our constructor."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


def _check_tree(root: Node) -> None:
    """Refuse aliases (a node reached twice) and nesting deeper than MAX_DEPTH.

    libyaml composes an alias as the anchored node itself, so the place reported for an alias
    is the key that uses it.
    """
    seen: set[int] = set()
    stack: list[tuple[Node, int, Mark]] = [(root, 1, root.start_mark)]
    while stack:
        node, depth, mark = stack.pop()
        if id(node) in seen:
            raise ConstructorError(
                None, None, "aliases (*name) are not allowed in catalog files", mark
            )
        seen.add(id(node))
        if depth > MAX_DEPTH:
            raise ConstructorError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
        # pushed in reverse so that children pop in document order: the anchor before its alias
        if isinstance(node, MappingNode):
            for key_node, value_node in reversed(node.value):
                stack.append((value_node, depth + 1, key_node.start_mark))
                stack.append((key_node, depth + 1, key_node.start_mark))
        elif isinstance(node, SequenceNode):
            stack.extend((item, depth + 1, item.start_mark) for item in reversed(node.value))


@dataclass(frozen=True)
class YamlDocument:
    """A parsed catalog file: its data and the node tree that says where each value stands."""

    path: Path
    data: Any
    root: Node | None

    def line_of(self, loc: tuple[int | str, ...]) -> int | None:
        """1-based line of the key at `loc` (a pydantic error location) or of its nearest parent."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            found = _child(node, part)
            if found is None:
                break
            node, line = found
        return line


def _field_of(root: Node, target: Node) -> str | None:
    """The dotted path (`build.volume_size_gib`, `gpus.0`) of a node, None at the root."""
    stack: list[tuple[Node, tuple[str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return ".".join(path) or None
        if isinstance(node, MappingNode):
            stack.extend((value, (*path, str(key.value))) for key, value in node.value)
        elif isinstance(node, SequenceNode):
            stack.extend((item, (*path, str(i))) for i, item in enumerate(node.value))
    return None


def _child(node: Node | None, part: int | str) -> tuple[Node, int] | None:
    """The child node at `part` and the line that names it (its key's line in a mapping)."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == str(part):
                return value_node, key_node.start_mark.line + 1
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item: Node = node.value[part]
        return item, item.start_mark.line + 1
    return None


def _read_at_most(path: Path, size: int) -> bytes | None:
    """Up to `size` bytes; None for a named pipe that nobody writes to.

    A FIFO's plain open waits for a writer, forever if none comes. Opened without waiting, a
    read answers at once: EOF while no writer is there, "would block" once one is (a shell's
    `<(command)` or a writer that is just starting), and then the pipe is read as it arrives.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb", buffering=0) as stream:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            first = _first_from_pipe(fd, size)
            if first is None:
                return None
        else:
            first = b""
        os.set_blocking(fd, True)
        chunks = [first]
        received = len(first)
        while received < size:
            chunk = stream.read(size - received)
            if not chunk:
                break
            chunks.append(chunk)
            received += len(chunk)
        return b"".join(chunks)


_WRITER_WAIT_S = 0.5


def _first_from_pipe(fd: int, size: int) -> bytes | None:
    """The first bytes once a writer is there; None when none came within _WRITER_WAIT_S."""
    deadline = time.monotonic() + _WRITER_WAIT_S
    while True:
        try:
            data = os.read(fd, size)
        except BlockingIOError:
            return b""  # a writer holds the pipe: the blocking reads take it from here
        if data:
            return data
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES, what: str = "YAML files") -> bytes:
    """The file's bytes, read at most `limit` + 1 of them: a pipe or a device (`/dev/zero`)
    has no size to check first, so the bound holds on what is read."""
    try:
        data = _read_at_most(path, limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    if data is None:
        raise InputError(
            "is a named pipe with no writer: reading it would wait forever",
            file=path,
            fix="give a regular file, or write to the pipe while nodeforge reads it",
        )
    if len(data) > limit:
        raise InputError(
            f"larger than the {limit}-byte limit for {what}",
            file=path,
            fix="split it or remove what is not catalog data",
        )
    return data


def read_yaml(path: Path) -> YamlDocument:
    """Read one catalog file, or raise InputError that says what is wrong and where."""
    try:
        text = read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=path) from None
    loader: _Loader | None = None
    root: Node | None = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is not None:
            _check_tree(root)
        data = loader.construct_document(root) if root is not None else None
    except _NumberError as exc:
        raise InputError(
            exc.problem or "a number out of range",
            file=path,
            field=_field_of(root, exc.node) if root is not None else None,
            line=exc.node.start_mark.line + 1,
            fix="write a finite number in the field's range",
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(
            f"invalid YAML: {problem}",
            file=path,
            line=mark.line + 1 if mark is not None else None,
        ) from None
    except yaml.reader.ReaderError as exc:
        raise InputError(
            f"invalid YAML: character #x{exc.character:04x} at offset {exc.position} is not "
            "allowed",
            file=path,
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=path) from None
    except RecursionError:
        raise InputError(f"nesting deeper than {MAX_DEPTH} levels", file=path) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(path=path, data=data, root=root)
