"""Every section a comment or docstring cites exists in docs/design/, and no citation uses an old label.

The rule and the rewrite live in scripts/rewrite_design_citations.py; this runs its ``--check`` over the tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_design_citation_in_the_tree_resolves() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rewrite_design_citations.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"dangling or old-style design citations:\n{result.stdout}{result.stderr}"
