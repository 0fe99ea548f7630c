"""Read a catalog directory into typed entries, resolving `extends` and naming every error's place.

Layout (all YAML):
    common.yml         catalog-wide variable defaults (optional)
    compat.yml         compatibility data the rules read
    os/<name>.yml      OS entries
    stacks/<name>.yml  stacks (may `extends` another stack)
    profiles/<name>.yml instance-type profiles
    <name>.yml         images (may `extends` another image)
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nodeforge.catalog.compat import Compat
from nodeforge.catalog.models import Common, Image, OsEntry, Profile, Stack
from nodeforge.catalog.yamlfile import YamlDocument, read_yaml
from nodeforge.errors import InputError

RESERVED = frozenset({"common.yml", "compat.yml"})
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Catalog:
    root: Path
    common: Common
    compat: Compat
    os: dict[str, OsEntry]
    stacks: dict[str, Stack]
    profiles: dict[str, Profile]
    images: dict[str, Image]
    files: dict[str, Path] = field(default_factory=dict)
    """Where each entry was read from, keyed 'kind/name' (e.g. 'images/p5-ubuntu24.04')."""

    def file_of(self, kind: str, name: str) -> Path:
        return self.files.get(f"{kind}/{name}", self.root)


def load_catalog(root: Path) -> Catalog:
    """Load and validate every catalog file under `root`; raise InputError on the first problem."""
    if not root.is_dir():
        raise InputError(
            "catalog directory not found",
            file=root,
            fix="pass --catalog DIR with the folder that holds stacks/, profiles/ and os/",
        )
    files: dict[str, Path] = {}
    compat_path = root / "compat.yml"
    if not compat_path.exists() and not compat_path.is_symlink():
        raise InputError(
            "compat.yml is missing",
            file=compat_path,
            fix="copy images/compat.yml from nodeforge into the catalog",
        )
    compat = _validate(read_yaml(_regular_file(compat_path)), Compat)
    common_path = root / "common.yml"
    common = (
        _validate(read_yaml(_regular_file(common_path)), Common)
        if common_path.exists() or common_path.is_symlink()
        else Common()
    )

    os_entries = _load_kind(root, "os", OsEntry, files)
    profiles = _load_kind(root, "profiles", Profile, files)
    stacks = _load_extending("stacks", _yaml_files(root / "stacks", "stacks"), Stack, files)
    image_paths = [p for p in _yaml_files(root, "images") if p.name not in RESERVED]
    images = _load_extending("images", image_paths, Image, files)

    catalog = Catalog(root, common, compat, os_entries, stacks, profiles, images, files)
    _check_references(catalog)
    return catalog


def _yaml_files(folder: Path, kind: str) -> list[Path]:
    """Every `*.yml` entry of the folder; one that is not a regular file is an error, not a
    silent skip (a directory, a dangling link or a FIFO named like an entry is a mistake)."""
    if not folder.is_dir():
        raise InputError(
            f"the {kind} folder is missing" if not folder.exists() else "is not a folder",
            file=folder,
            fix=f"create {folder.name}/ with one YAML file per entry",
        )
    try:
        names = sorted(entry.name for entry in folder.iterdir())
    except OSError as exc:
        raise InputError(
            f"cannot list the {kind} folder ({exc.strerror or exc})",
            file=folder,
            fix="make it readable by the user running nodeforge",
        ) from None
    others = [name for name in names if name.endswith(".yaml")]
    if others:
        raise InputError(
            f"'{others[0]}' ends in .yaml",
            file=folder / others[0],
            fix="name catalog files <name>.yml",
        )
    return [_regular_file(folder / name) for name in names if name.endswith(".yml")]


def _regular_file(path: Path) -> Path:
    """`path`, or InputError when it is not a regular file (after following links)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise InputError(
            f"cannot read the file ({exc.strerror or exc})",
            file=path,
            fix="remove the broken link or point it at a catalog file",
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise InputError(
            f"is {kind}, where a catalog file is expected",
            file=path,
            fix="replace it with a YAML file, or remove it",
        )
    return path


def _validate(doc: YamlDocument, model: type[M]) -> M:
    if not isinstance(doc.data, dict):
        raise InputError(
            f"expected a mapping of {model.__name__} fields, found "
            f"{type(doc.data).__name__ if doc.data is not None else 'an empty file'}",
            file=doc.path,
            line=doc.line_of(()),
        )
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise input_error_from(exc, doc.path, doc.line_of, doc.data) from None


Locator = Callable[[tuple[int | str, ...]], tuple[Path, int | None]]


def input_error_from(
    exc: ValidationError,
    path: Path,
    line_of: Callable[[tuple[int | str, ...]], int | None],
    data: Any,
) -> InputError:
    """The first problem of a validation error, at its file and line; with the validated
    `data`, the field path is the user's own (no union branch such as `vcpus.int`)."""
    return located_error(exc, data, lambda loc: (path, line_of(loc)))


def located_error(exc: ValidationError, data: Any, locate: Locator) -> InputError:
    errors = exc.errors(include_url=False)

    def where(error: Any) -> tuple[int | str, ...]:
        loc = tuple(error["loc"])
        return loc if data is None else _data_path(data, loc, error["type"] == "missing")

    loc = where(errors[0])
    # a union reports one error per branch at the same place: one message says them all
    same = [e for e in errors if where(e) == loc]
    messages = list(dict.fromkeys(_message(e) for e in same))
    message = messages[0] + "".join(
        f" or {m.removeprefix('Input should be ')}" for m in messages[1:]
    )
    more = len(errors) - len(same)
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''} in this file)"
    path, line = locate(tuple(loc))
    return InputError(message, file=path, field=".".join(str(p) for p in loc) or None, line=line)


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key (not part of the schema)"
    if error["type"] == "missing":
        return "required field is missing"
    return str(error["msg"]).removeprefix("Value error, ")


def _data_path(data: Any, loc: tuple[int | str, ...], missing: bool) -> tuple[int | str, ...]:
    """The part of a pydantic location that exists in the data: union branches (`int`,
    `literal['unknown']`, `list[str]`) are pydantic's names, not the user's."""
    path: list[int | str] = []
    for index, part in enumerate(loc):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        elif missing and index == len(loc) - 1:
            path.append(part)  # the required key the user left out
            break
        else:
            continue
        path.append(part)
    return tuple(path)


def _load_kind(root: Path, kind: str, model: type[M], files: dict[str, Path]) -> dict[str, M]:
    entries: dict[str, M] = {}
    for path in _yaml_files(root / kind, kind):
        doc = read_yaml(path)
        entry = _validate(doc, model)
        _check_name(doc, getattr(entry, "name", None))
        entries[path.stem] = entry
        files[f"{kind}/{path.stem}"] = path
    return entries


def _check_name(doc: YamlDocument, name: object) -> None:
    if name != doc.path.stem:
        raise InputError(
            f"name '{name}' differs from the file name",
            file=doc.path,
            field="name",
            line=doc.line_of(("name",)),
            fix=f"set name: {doc.path.stem}, or rename the file to {name}.yml",
        )


def _load_extending(
    kind: str, paths: list[Path], model: type[M], files: dict[str, Path]
) -> dict[str, M]:
    """Entries that may `extends` a sibling: the parent's fields first, the child's on top."""
    docs: dict[str, YamlDocument] = {}
    for path in paths:
        doc = read_yaml(path)
        if not isinstance(doc.data, dict):
            _validate(doc, model)  # raises the "expected a mapping" error
        docs[path.stem] = doc
        files[f"{kind}/{path.stem}"] = path

    merged: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in merged:
            return merged[name]
        doc = docs[name]
        parent = doc.data.get("extends")
        data: dict[str, Any] = doc.data
        if parent is not None:
            if not isinstance(parent, str):
                raise InputError(
                    f"extends must name another {kind[:-1]} by its name (a string), "
                    f"not {type(parent).__name__}",
                    file=doc.path,
                    field="extends",
                    line=doc.line_of(("extends",)),
                    fix=f"name one of: {', '.join(sorted(docs)) or '(none)'}",
                )
            if parent not in docs:
                raise InputError(
                    f"extends '{parent}', but no {kind[:-1]} in this catalog has that name",
                    file=doc.path,
                    field="extends",
                    line=doc.line_of(("extends",)),
                    fix=f"name one of: {', '.join(sorted(docs)) or '(none)'}",
                )
            if parent in chain or parent == name:
                cycle = " -> ".join((*chain, name, parent))
                raise InputError(
                    f"extends forms a cycle ({cycle})",
                    file=doc.path,
                    field="extends",
                    line=doc.line_of(("extends",)),
                    fix="remove one of the extends links",
                )
            data = deep_merge(resolve(parent, (*chain, name)), doc.data)
        merged[name] = data
        return data

    # parents first: an error in a parent is reported on the parent's own file
    resolved = {name: resolve(name, ()) for name in docs}
    chains = {name: _chain(name, docs) for name in docs}
    entries: dict[str, M] = {}
    for name in sorted(docs, key=lambda n: (len(chains[n]), n)):
        doc, data = docs[name], resolved[name]
        try:
            entry = model.model_validate(data)
        except ValidationError as exc:
            raise located_error(exc, data, _place_in_chain(chains[name], docs)) from None
        _check_name(doc, getattr(entry, "name", None))
        entries[name] = entry
    return dict(sorted(entries.items()))


def _chain(name: str, docs: Mapping[str, YamlDocument]) -> list[str]:
    """The entry, then its parent, and so on (resolve() has refused cycles and unknown names)."""
    chain = [name]
    while isinstance(parent := docs[chain[-1]].data.get("extends"), str) and parent not in chain:
        chain.append(parent)
    return chain


def _place_in_chain(chain: list[str], docs: Mapping[str, YamlDocument]) -> Locator:
    """Where a value of a merged entry was written: the nearest entry of the chain that sets
    it (the child over its parents), else the child itself."""

    def place(loc: tuple[int | str, ...]) -> tuple[Path, int | None]:
        for current in chain:
            doc = docs[current]
            if _has_path(doc.data, loc):
                return doc.path, doc.line_of(loc)
        # a key missing everywhere: the child is where it belongs, under its nearest parent key
        doc = docs[chain[0]]
        return doc.path, doc.line_of(loc)

    return place


def _has_path(data: Any, loc: tuple[int | str, ...]) -> bool:
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return False
    return True


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; any other value (lists included) is replaced by the override."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value
    return result


def _check_references(catalog: Catalog) -> None:
    for name, image in catalog.images.items():
        refs: list[tuple[str, str, Mapping[str, object]]] = [
            ("os", image.os, catalog.os),
            ("stack", image.stack, catalog.stacks),
        ]
        refs += [("profiles", p, catalog.profiles) for p in image.profiles]
        for field_name, ref, table in refs:
            if ref not in table:
                kind = {"os": "OS entry", "stack": "stack", "profiles": "profile"}[field_name]
                path = _file_that_sets(catalog, name, field_name)
                raise InputError(
                    f"names {kind} '{ref}', which is not in the catalog",
                    file=path,
                    field=field_name,
                    line=read_yaml(path).line_of((field_name,)),
                    fix=f"use one of: {', '.join(sorted(table)) or '(none)'}",
                )


def _file_that_sets(catalog: Catalog, image: str, field_name: str) -> Path:
    """The file of the image or of the `extends` parent whose own text sets the field: a wrong
    value inherited by a child is the parent's to fix."""
    path = catalog.file_of("images", image)
    seen: set[Path] = set()
    while path not in seen:
        seen.add(path)
        data = read_yaml(path).data
        if not isinstance(data, dict) or field_name in data:
            return path
        parent = data.get("extends")
        if not isinstance(parent, str) or parent not in catalog.images:
            return path
        path = catalog.file_of("images", parent)
    return path
