"""Run the compatibility rules over catalog targets and collect what they find."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from nodeforge.rules import RULES, Rule, Severity
from nodeforge.target import Target


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    image: str
    profile: str
    message: str
    fix: str


@dataclass(frozen=True)
class Report:
    targets: list[tuple[str, str]]
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def status_of(self, image: str, profile: str) -> str:
        severities = {f.severity for f in self.findings if (f.image, f.profile) == (image, profile)}
        if "error" in severities:
            return "fail"
        return "warn" if severities else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "targets": [
                {"image": i, "profile": p, "status": self.status_of(i, p)} for i, p in self.targets
            ],
            "findings": [asdict(f) for f in self.findings],
            "rules": [{"id": r.id, "summary": r.summary} for r in RULES],
        }


def check_targets(
    targets: list[Target], *, allow_unverified: bool = False, rules: tuple[Rule, ...] = RULES
) -> Report:
    findings: list[Finding] = []
    for target in targets:
        for rule in rules:
            if not rule.applies(target):
                continue
            for problem in rule.check(target):
                severity = problem.severity
                if rule.id == "artifact-unverified" and allow_unverified:
                    severity = "warning"
                findings.append(
                    Finding(
                        rule=rule.id,
                        severity=severity,
                        image=target.image.name,
                        profile=target.profile.name,
                        message=problem.message,
                        fix=problem.fix,
                    )
                )
    return Report(targets=[(t.image.name, t.profile.name) for t in targets], findings=findings)
