"""Safe YAML reading for catalog files: size, depth and alias limits, duplicate keys, line lookup.

PyYAML's safe loader still accepts inputs that hurt a tool which reads user catalogs: alias
bombs, unbounded nesting, duplicate keys that silently overwrite each other, and dates that
become datetime objects. This module refuses all of them and keeps the node tree so that a
validation error can be pointed at a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from nodeforge.errors import InputError

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32


class _Resolver(Resolver):
    """The YAML 1.1 resolver without timestamps: catalog dates and versions stay strings."""


_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


class _Loader(Reader, Scanner, Parser, Composer, SafeConstructor, _Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ConstructorError(
                None, None, "aliases (*name) are not allowed in catalog files", event.start_mark
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ConstructorError(
                None,
                None,
                f"nesting deeper than {MAX_DEPTH} levels",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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


@dataclass(frozen=True)
class YamlDocument:
    """A parsed catalog file: its data and the node tree that says where each value stands."""

    path: Path
    data: Any
    root: Node | None

    def line_of(self, loc: tuple[int | str, ...]) -> int | None:
        """1-based line of the value at `loc` (a pydantic error location) or its nearest parent."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            child = _child(node, part)
            if child is None:
                break
            node = child
            line = node.start_mark.line + 1
        return line


def _child(node: Node | None, part: int | str) -> Node | None:
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == str(part):
                found: Node = value_node
                return found
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: Node = node.value[part]
        return child
    return None


def read_yaml(path: Path) -> YamlDocument:
    """Read one catalog file, or raise InputError that says what is wrong and where."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror})", file=path) from None
    if size > MAX_FILE_BYTES:
        raise InputError(
            f"file is {size} bytes, larger than the {MAX_FILE_BYTES}-byte limit for catalog files",
            file=path,
            fix="split it or remove what is not catalog data",
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror})", file=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=path) from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(
            f"invalid YAML: {problem}",
            file=path,
            line=mark.line + 1 if mark is not None else None,
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=path) from None
    except RecursionError:
        raise InputError(f"nesting deeper than {MAX_DEPTH} levels", file=path) from None
    finally:
        loader.dispose()
    return YamlDocument(path=path, data=data, root=root)
