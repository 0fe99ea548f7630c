"""Static rules over the Packer templates (and the var file handed to them), each with an id.

No Packer binary is needed: these catch what `packer validate` would miss (a floating plugin
version, an AMI id pinned in a template) and what it would only catch on a machine with AWS
access (a variable nobody passes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeforge.errors import InputError
from nodeforge.packer.template import Source, Template

_EXACT_VERSION = re.compile(r"^\s*=?\s*v?\d+\.\d+\.\d+\s*$")
_AMI_ID = re.compile(r"\bami-(?:[0-9a-f]{17}|[0-9a-f]{8})\b")


@dataclass(frozen=True)
class VarFile:
    path: Path
    values: Mapping[str, Any]


@dataclass(frozen=True)
class Finding:
    rule: str
    file: Path
    block: str
    message: str
    fix: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"[{self.rule}] {where}: {self.block}: {self.message}. Fix: {self.fix}"


Check = Callable[[Template, VarFile | None], Iterator[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Check


def _var_declared(template: Template, var_file: VarFile | None) -> Iterator[Finding]:
    if var_file is None:
        return
    for name in sorted(set(var_file.values) - set(template.variables)):
        yield Finding(
            "var-declared",
            var_file.path,
            f"variable '{name}'",
            "the var file sets a variable no template declares (Packer stops on it)",
            f'declare variable "{name}" in {template.directory}/variables.pkr.hcl, '
            "or stop writing it to the var file",
        )


def _var_passed(template: Template, var_file: VarFile | None) -> Iterator[Finding]:
    if var_file is None:
        return
    for variable in template.variables.values():
        if not variable.has_default and variable.name not in var_file.values:
            yield Finding(
                "var-passed",
                variable.file,
                f'variable "{variable.name}"',
                f"has no default and {var_file.path.name} does not set it",
                "give it a default, or write it to the var file (nodeforge.packer.varfile)",
                variable.line,
            )


def _plugin_pinned(template: Template, _var_file: VarFile | None) -> Iterator[Finding]:
    for plugin in template.plugins:
        if plugin.version is None or not _EXACT_VERSION.match(plugin.version):
            yield Finding(
                "plugin-pinned",
                plugin.file,
                f"required_plugins.{plugin.name}",
                f"version {plugin.version!r} is not one exact version: `packer init` could "
                "install a different plugin from one build to the next",
                'pin it: version = "= X.Y.Z" (the release you tested)',
                plugin.line,
            )


def _no_ami_id(template: Template, _var_file: VarFile | None) -> Iterator[Finding]:
    for file in template.files:
        for number, text in enumerate(file.text.splitlines(), start=1):
            for match in _AMI_ID.finditer(text):
                yield Finding(
                    "no-ami-id",
                    file.path,
                    f"line {number}",
                    f"hard-coded AMI id {match.group(0)}: it exists in one region and goes stale",
                    "look the base AMI up from the OS entry (SSM parameter or owners + name "
                    "filter): var.source_ami or source_ami_filter",
                    number,
                )


def _ebs_sources(template: Template) -> Iterator[Source]:
    return (s for s in template.sources if s.type.startswith("amazon-"))


def _blocks(body: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    value = body.get(name, [])
    return [b for b in (value if isinstance(value, list) else [value]) if isinstance(b, Mapping)]


def _imdsv2(template: Template, _var_file: VarFile | None) -> Iterator[Finding]:
    for source in _ebs_sources(template):
        tokens = [b.get("http_tokens") for b in _blocks(source.body, "metadata_options")]
        if tokens != ["required"]:
            yield Finding(
                "imdsv2",
                source.file,
                source.ref,
                "the builder instance does not require IMDSv2 session tokens",
                'add metadata_options { http_endpoint = "enabled"  http_tokens = "required" }',
                source.line,
            )
        if source.body.get("imds_support") != "v2.0":
            yield Finding(
                "imdsv2",
                source.file,
                source.ref,
                "instances launched from the AMI may fall back to IMDSv1",
                'set imds_support = "v2.0"',
                source.line,
            )


def _root_encrypted(template: Template, _var_file: VarFile | None) -> Iterator[Finding]:
    for source in _ebs_sources(template):
        mappings = _blocks(source.body, "launch_block_device_mappings")
        encrypted = bool(mappings) and all(m.get("encrypted") is True for m in mappings)
        if source.body.get("encrypt_boot") is not True and not encrypted:
            yield Finding(
                "root-encrypted",
                source.file,
                source.ref,
                "the root volume (and so the AMI's snapshot) is not encrypted",
                "set encrypted = true in launch_block_device_mappings for the root device "
                "(kms_key_id = var.kms_key_id), or encrypt_boot = true",
                source.line,
            )


RULES: tuple[Rule, ...] = (
    Rule("var-declared", "every variable the var file sets is declared", _var_declared),
    Rule("var-passed", "every variable without a default is set by the var file", _var_passed),
    Rule("plugin-pinned", "every required plugin is pinned to one exact version", _plugin_pinned),
    Rule("no-ami-id", "no hard-coded ami- id in any template", _no_ami_id),
    Rule("imdsv2", "builder and AMI require IMDSv2", _imdsv2),
    Rule("root-encrypted", "the root volume is encrypted", _root_encrypted),
)


def check_template(template: Template, var_file: VarFile | None = None) -> list[Finding]:
    """Every rule's findings, in rule order; the var file rules run only when one is given."""
    return [finding for rule in RULES for finding in rule.check(template, var_file)]


def require_clean(findings: list[Finding]) -> None:
    """Stop before Packer runs when a rule found something, naming the first place and fix."""
    if not findings:
        return
    first = findings[0]
    others = f" (and {len(findings) - 1} more: {'; '.join(map(str, findings[1:]))})"
    raise InputError(
        f"Packer template rule {first.rule}: {first.block}: {first.message}"
        + (others if len(findings) > 1 else ""),
        file=first.file,
        line=first.line,
        fix=first.fix,
    )
