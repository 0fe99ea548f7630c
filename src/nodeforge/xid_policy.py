"""What a GPU node needs after the Xid events of its kernel log: the table, and the verdict.

The table is data, `xid_policy.yml` in this package (its header says what each action means
and which sources each entry follows): per Xid its name, NVIDIA's immediate-action bucket, the
action nodeforge takes (`application` < `reset_gpu` < `reboot_node` < `replace_node`), whether
it reports a hardware fault, and its sources. `action_for(xid)` looks a code up; an unlisted
code gets the table's `default` entry (reboot the node: see the YAML for why).

`classify(events)` turns the events of `nodeforge.parsers.kernel_log.parse_kernel_log` into a
verdict: the worst action over the events, and `healthy` when that is at most `application`
(no event, or only the workload's own errors: the node itself needs nothing). The action of
one event is its entry's, except for a `Nonfatal` NVLink5 event (the entry's
`nonfatal_action`) and for Xid 154, whose printed recovery action decides. A fell-off-the-bus
report without an Xid counts as the Xid it stands for (79). An Xid 45 that names its cause
(`caused by previous Xid 149`) while that Xid is not in the log for the same GPU takes the
cause's action as well: the log was cut or filtered, and the cause is what the node needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib.resources import as_file, files
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nodeforge.catalog.loader import input_error_from
from nodeforge.catalog.yamlfile import read_yaml
from nodeforge.errors import InputError
from nodeforge.parsers.kernel_log import XidEvent
from nodeforge.parsers.record import Record

Action = Literal["application", "reset_gpu", "reboot_node", "replace_node"]
ACTIONS: tuple[Action, ...] = ("application", "reset_gpu", "reboot_node", "replace_node")
"""Mildest first: a later action also does what an earlier one would."""


class XidAction(Record):
    """One entry of the table (`xid` None for the default entry)."""

    xid: int | None
    name: str
    mnemonic: str | None
    nvidia_action: str | None
    """NVIDIA's "Resolution Bucket (Immediate Action)", e.g. `RESET_GPU`, `RESTART_BM`."""
    action: Action
    nonfatal_action: Action | None
    hardware_fault: bool
    sources: tuple[str, ...]
    """Full citations, resolved from the table's references."""
    note: str | None


class XidFinding(Record):
    event: XidEvent
    entry: XidAction
    action: Action


class XidVerdict(Record):
    action: Action | None
    """The worst action over the events; None when there was none."""
    healthy: bool
    """No event asks more of the node than `application`."""
    hardware_fault: bool
    findings: tuple[XidFinding, ...]
    gpus: tuple[str, ...]
    """Bus ids of the GPUs whose events ask for more than `application`, sorted."""
    unknown_xids: tuple[int, ...]
    """Codes the table does not list (they took the default action), sorted."""


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _DefaultDoc(_Doc):
    name: str
    action: Action
    hardware_fault: bool
    sources: list[str] = Field(min_length=1)
    note: str | None = None


class _EntryDoc(_DefaultDoc):
    xid: int = Field(ge=0)
    mnemonic: str | None = None
    nvidia_action: str | None = None
    nonfatal_action: Action | None = None


class _PolicyDoc(_Doc):
    references: dict[str, str]
    default: _DefaultDoc
    fallen_off_bus_xid: int
    recovery_actions: dict[str, Action]
    xids: list[_EntryDoc] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        codes = [entry.xid for entry in self.xids]
        twice = sorted({code for code in codes if codes.count(code) > 1})
        if twice:
            raise ValueError(f"Xid {twice[0]} is listed more than once")
        cited = [*self.default.sources, *(s for entry in self.xids for s in entry.sources)]
        unknown = sorted(set(cited) - set(self.references))
        if unknown:
            raise ValueError(f"source '{unknown[0]}' is not in references")
        if self.fallen_off_bus_xid not in codes:
            raise ValueError(f"fallen_off_bus_xid {self.fallen_off_bus_xid} is not listed")
        if "None" not in self.recovery_actions:
            raise ValueError("recovery_actions must say what 'None' (no recovery) needs")
        return self


class XidPolicy:
    """The loaded table; `load_policy()` gives the packaged one."""

    def __init__(self, doc: _PolicyDoc) -> None:
        def cite(ids: list[str]) -> tuple[str, ...]:
            return tuple(" ".join(doc.references[i].split()) for i in ids)

        self.default = XidAction(
            xid=None,
            name=doc.default.name,
            mnemonic=None,
            nvidia_action=None,
            action=doc.default.action,
            nonfatal_action=None,
            hardware_fault=doc.default.hardware_fault,
            sources=cite(doc.default.sources),
            note=doc.default.note,
        )
        self.entries: Mapping[int, XidAction] = {
            e.xid: XidAction(
                xid=e.xid,
                name=e.name,
                mnemonic=e.mnemonic,
                nvidia_action=e.nvidia_action,
                action=e.action,
                nonfatal_action=e.nonfatal_action,
                hardware_fault=e.hardware_fault,
                sources=cite(e.sources),
                note=e.note,
            )
            for e in doc.xids
        }
        self.fallen_off_bus_xid = doc.fallen_off_bus_xid
        self.recovery_actions: Mapping[str, Action] = dict(doc.recovery_actions)

    def action_for(self, xid: int) -> XidAction:
        """The entry of `xid`, or the default entry for a code the table does not list."""
        return self.entries.get(xid, self.default)

    def entry_of(self, event: XidEvent) -> XidAction:
        """The entry an event is looked up under (Xid 79 for a fell-off report with no code)."""
        return self.action_for(self.fallen_off_bus_xid if event.xid is None else event.xid)

    def event_action(self, event: XidEvent) -> Action:
        """What the event alone asks for: its recovery action (Xid 154), its entry's
        `nonfatal_action` (a `Nonfatal` NVLink5 event) or its entry's action."""
        entry = self.entry_of(event)
        if event.recovery_action is not None:
            return self.recovery_actions.get(event.recovery_action, self.default.action)
        if event.nvlink is not None and not event.nvlink.fatal and entry.nonfatal_action:
            return entry.nonfatal_action
        return entry.action

    def classify(self, events: Iterable[XidEvent]) -> XidVerdict:
        """The verdict on a log's events (see the module doc)."""
        seen = list(events)
        present = {(event.bus_id, event.xid) for event in seen}

        def action(event: XidEvent) -> Action:
            own = self.event_action(event)
            cause = event.caused_by_xid
            if cause is None or (event.bus_id, cause) in present:
                return own
            # the cause was cut or filtered out of the log; it is what the node needs
            return max(own, self.action_for(cause).action, key=ACTIONS.index)

        findings = tuple(
            XidFinding(event=event, entry=self.entry_of(event), action=action(event))
            for event in seen
        )
        worst = max((ACTIONS.index(f.action) for f in findings), default=None)
        needing = [f for f in findings if f.action != "application"]
        return XidVerdict(
            action=None if worst is None else ACTIONS[worst],
            healthy=not needing,
            hardware_fault=any(f.entry.hardware_fault for f in findings),
            findings=findings,
            gpus=tuple(sorted({f.event.bus_id for f in needing if f.event.bus_id is not None})),
            unknown_xids=tuple(
                sorted(
                    {
                        f.event.xid
                        for f in findings
                        if f.entry.xid is None and f.event.xid is not None
                    }
                )
            ),
        )


def load_policy(path: Path | None = None) -> XidPolicy:
    """The table at `path`, or the one packaged with nodeforge; InputError names the file,
    field and line of any problem."""
    if path is not None:
        return _read_policy(path)
    return _packaged_policy()


@cache
def _packaged_policy() -> XidPolicy:
    with as_file(files("nodeforge").joinpath("xid_policy.yml")) as path:
        return _read_policy(path)


def _read_policy(path: Path) -> XidPolicy:
    document = read_yaml(path)
    if not isinstance(document.data, dict):
        raise InputError("expected a mapping with references, default and xids", file=path)
    try:
        return XidPolicy(_PolicyDoc.model_validate(document.data))
    except ValidationError as exc:
        raise input_error_from(exc, path, document.line_of, document.data) from None


def action_for(xid: int) -> XidAction:
    """The packaged table's entry for `xid` (its default entry for an unlisted code)."""
    return _packaged_policy().action_for(xid)


def classify(events: Iterable[XidEvent]) -> XidVerdict:
    """The packaged table's verdict on `events` (see the module doc)."""
    return _packaged_policy().classify(events)
