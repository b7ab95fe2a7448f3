"""Every planted bug of the notebooks' mutation suite still applies to the code as it is.

The mutation suite itself is slow (it runs a notebook per mutant, about a quarter of an hour),
so it is outside the fast lane; a change that moves the text a mutant edits (a new argument in
``create_run``, say) would be seen only there, and would stop the whole suite at its setup.
Applying each mutant to a copy takes a second or two, so the fast lane sees it first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "notebook_mutations", Path(__file__).with_name("test_notebook_mutations.py"))
mutations = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mutations   # its dataclasses look themselves up there
_spec.loader.exec_module(mutations)


@pytest.mark.parametrize("mutant", mutations.MUTANTS, ids=lambda m: m.name)
def test_the_mutant_applies_to_the_code_as_it_is(mutant, tmp_path: Path) -> None:
    cells = mutations.broken_copy(mutant, tmp_path)
    edited = [p for p in (tmp_path / "refund_agent").rglob("*.py") if "MUTANT" in p.read_text()]
    edited += [p for p in (tmp_path / "offline_model").rglob("*.py") if "MUTANT" in p.read_text()]
    edited += [p for p in (tmp_path / "notebooks").glob("*.py") if "MUTANT" in p.read_text()]
    in_cells = any("MUTANT" in cell for book in cells.values() for cell in book)
    assert edited or in_cells or _changed(mutant, tmp_path, cells), (
        f"{mutant.name}: its edits applied but changed nothing")


def _changed(mutant, home: Path, cells) -> bool:
    """Whether any edit's new text is now where its old text was (a mutant without a MUTANT
    comment)."""
    for edits in (mutant.edits, *mutant.alternatives):
        for _relative, _old, new in edits:
            if any(new in p.read_text() for p in home.rglob("*.py")) or any(
                    new in cell for book in cells.values() for cell in book):
                return True
    return False
