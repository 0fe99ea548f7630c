"""The Packer templates (HCL2) read into typed models with python-hcl2.

python-hcl2 keeps expressions as `${...}` strings and, with `strip_string_quotes`, gives plain
strings for literals; blocks come as lists of single-key mappings (one key per label).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions
from lark.exceptions import UnexpectedInput
from pydantic import Field

from nodeforge.catalog.models import Model
from nodeforge.errors import InputError
from nodeforge.paths import SHIPPED_CATALOG

TEMPLATE_DIR = SHIPPED_CATALOG / "packer"
"""The shipped templates: plugins, variables, sources and build, one folder, loaded together."""

_OPTIONS = SerializationOptions(with_comments=False, strip_string_quotes=True)
_BLOCK_MARKER = "__is_block__"
_EXPRESSION = re.compile(r"^\$\{(.*)\}$", re.S)


class Variable(Model):
    name: str
    type: str | None
    default: Any = None
    has_default: bool
    sensitive: bool = False
    file: Path
    line: int | None


class Plugin(Model):
    name: str
    source: str | None
    version: str | None
    file: Path
    line: int | None


class Source(Model):
    """One `source "TYPE" "NAME"` block; `body` is its attributes and nested blocks."""

    type: str
    name: str
    body: dict[str, Any]
    file: Path
    line: int | None

    @property
    def ref(self) -> str:
        return f"source.{self.type}.{self.name}"


class Step(Model):
    """A provisioner or post-processor of a build, in template order."""

    kind: str
    type: str
    body: dict[str, Any]


class Build(Model):
    name: str | None
    sources: list[str]
    provisioners: list[Step]
    post_processors: list[Step]
    file: Path
    line: int | None


class TemplateFile(Model):
    path: Path
    text: str
    body: dict[str, Any]


class Template(Model):
    directory: Path
    files: list[TemplateFile]
    variables: dict[str, Variable] = Field(default_factory=dict)
    plugins: list[Plugin] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    builds: list[Build] = Field(default_factory=list)

    def only_names(self) -> list[str]:
        """The names `packer build -only=` accepts: BUILD.TYPE.NAME for every source of a build."""
        names = []
        for build in self.builds:
            for ref in build.sources:
                type_and_name = ref.removeprefix("source.")
                names.append(f"{build.name}.{type_and_name}" if build.name else type_and_name)
        return names


def expression(value: object) -> str | None:
    """The inside of a `${...}` expression, or None for a literal."""
    if isinstance(value, str) and (match := _EXPRESSION.match(value)):
        return match.group(1)
    return None


def block_line(text: str, *words: str) -> int | None:
    """The line of the block header `WORD "LABEL" ...` in the file's text (1-based)."""
    parts = [re.escape(words[0]), *(rf'"{re.escape(w)}"' for w in words[1:])]
    pattern = re.compile(r"^[ \t]*" + r"\s+".join(parts) + r"\s*\{", re.M)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _attributes(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != _BLOCK_MARKER}


def _labelled(blocks: list[dict[str, Any]], depth: int) -> list[tuple[list[str], dict[str, Any]]]:
    """Unwrap `depth` levels of labels: [{"a": {"b": body}}] -> [(["a", "b"], body)]."""
    found: list[tuple[list[str], dict[str, Any]]] = [([], block) for block in blocks]
    for _ in range(depth):
        found = [
            ([*labels, label], inner)
            for labels, block in found
            for label, inner in block.items()
            if label != _BLOCK_MARKER
        ]
    return [(labels, _attributes(body)) for labels, body in found]


def _parse(path: Path) -> TemplateFile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the template: {exc.strerror}", file=path) from None
    try:
        body = hcl2.loads(text, serialization_options=_OPTIONS)
    except UnexpectedInput as exc:
        raise InputError(
            f"not valid HCL2 (column {exc.column})",
            file=path,
            line=exc.line,
            fix="correct the syntax (`packer fmt` shows the place)",
        ) from None
    return TemplateFile(path=path, text=text, body=body)


def _variables(file: TemplateFile, into: dict[str, Variable]) -> None:
    for labels, body in _labelled(file.body.get("variable", []), 1):
        name = labels[0]
        line = block_line(file.text, "variable", name)
        if name in into:
            raise InputError(
                f"variable '{name}' is declared twice (also in {into[name].file.name})",
                file=file.path,
                line=line,
                fix="keep one declaration",
            )
        declared_type = body.get("type")
        into[name] = Variable(
            name=name,
            type=expression(declared_type) or declared_type,
            default=body.get("default"),
            has_default="default" in body,
            sensitive=body.get("sensitive") is True,
            file=file.path,
            line=line,
        )


def _plugins(file: TemplateFile) -> list[Plugin]:
    plugins = []
    for packer_block in file.body.get("packer", []):
        for required in packer_block.get("required_plugins", []):
            for name, spec in _attributes(required).items():
                match = re.search(rf"^[ \t]*{re.escape(name)}\s*=", file.text, re.M)
                plugins.append(
                    Plugin(
                        name=name,
                        source=spec.get("source") if isinstance(spec, dict) else None,
                        version=spec.get("version") if isinstance(spec, dict) else None,
                        file=file.path,
                        line=file.text.count("\n", 0, match.start()) + 1 if match else None,
                    )
                )
    return plugins


def _steps(body: dict[str, Any], kind: str) -> list[Step]:
    return [
        Step(kind=kind, type=labels[0], body=step)
        for labels, step in _labelled(body.get(kind, []), 1)
    ]


def load_template(directory: Path = TEMPLATE_DIR) -> Template:
    """Every `*.pkr.hcl` file of the folder, as Packer reads them: one template."""
    paths = sorted(directory.glob("*.pkr.hcl"))
    if not paths:
        raise InputError(
            "no Packer templates (*.pkr.hcl) in this folder",
            file=directory,
            fix="point at the folder that holds the .pkr.hcl files (images/packer)",
        )
    files = [_parse(path) for path in paths]
    variables: dict[str, Variable] = {}
    plugins: list[Plugin] = []
    sources: list[Source] = []
    builds: list[Build] = []
    for file in files:
        _variables(file, variables)
        plugins.extend(_plugins(file))
        for (type_, name), body in _labelled(file.body.get("source", []), 2):
            sources.append(
                Source(
                    type=type_,
                    name=name,
                    body=body,
                    file=file.path,
                    line=block_line(file.text, "source", type_, name),
                )
            )
        for raw in file.body.get("build", []):
            body = _attributes(raw)
            builds.append(
                Build(
                    name=body.get("name"),
                    sources=list(body.get("sources", [])),
                    provisioners=_steps(body, "provisioner"),
                    post_processors=_steps(body, "post-processor"),
                    file=file.path,
                    line=block_line(file.text, "build"),
                )
            )
    return Template(
        directory=directory,
        files=files,
        variables=variables,
        plugins=plugins,
        sources=sources,
        builds=builds,
    )
