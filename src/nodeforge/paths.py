"""Where the repository's own files are: playbooks, roles, the validation suite, the catalog.

nodeforge runs from a checkout (an editable install): the Ansible content and the suite live
beside the package, not inside it.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO_ROOT / "playbooks"
VALIDATION_SUITE = REPO_ROOT / "validation"
SHIPPED_CATALOG = REPO_ROOT / "images"
