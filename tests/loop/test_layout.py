"""The layout keeps the architecture visible: a small core, the desk on top, the stand-in apart.

These read the source, not behaviour: they fail when a change quietly undoes the layout (a
desk import creeping into the loop, a boundary losing its home, a module growing past what a
reader takes in at once).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import refund_agent
from refund_agent import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "refund_agent"
STAND_IN = ROOT / "offline_model"
# The core: what an agent of your own needs, importing nothing of the refund desk.
CORE = ["loop.py", "turns.py", "streaming.py", "tools.py", "models.py", "errors.py",
        "config.py", "crash.py", "text.py", "intake.py"]


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, absolute (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def test_the_package_has_a_dozen_top_level_modules_at_most():
    assert len(list(PACKAGE.glob("*.py"))) <= 12


def test_the_core_imports_nothing_of_the_desk_or_the_front_ends():
    wrong = {name: sorted(m for m in _imports(PACKAGE / name)
                          if m.startswith(("refund_agent.desk", "refund_agent.web",
                                           "refund_agent.cli", "offline_model")))
             for name in CORE}
    assert not {name: found for name, found in wrong.items() if found}


def test_the_stand_in_imports_nothing_of_refund_agent():
    wrong = {str(path.relative_to(ROOT)): sorted(m for m in _imports(path)
                                                 if m.startswith("refund_agent"))
             for path in STAND_IN.rglob("*.py")}
    assert not {path: found for path, found in wrong.items() if found}


def test_each_boundary_lives_where_the_loop_says():
    """loop.py's docstring names each boundary as file:function; that function says so."""
    named = re.findall(r"``([\w/]+\.py):([\w.]+)``", refund_agent.loop.__doc__ or "")
    assert len(named) == 7, named
    for number, (file, function) in enumerate(named, start=1):
        source = (PACKAGE / file).read_text()
        name = function.split(".")[-1]
        body = re.search(rf"def {name}\(.*?\"\"\"(.*?)\"\"\"", source, re.S)
        assert body and f"Boundary {number}" in body.group(1), (number, file, function)
        others = [path for path in PACKAGE.rglob("*.py") if path != PACKAGE / file
                  and re.search(rf"Boundary {number}\b", path.read_text())
                  and path.name != "loop.py"]
        assert not others, (number, others)


def test_no_module_outgrows_a_reading():
    """500 lines at most, outside the stand-in (whose brain is a reader of English)."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long


def test_the_error_tree_names_every_error():
    defined = {name for name, value in vars(errors).items()
               if isinstance(value, type) and issubclass(value, BaseException)
               and value.__module__ == errors.__name__}
    drawn = set(re.findall(r"[├└]── (\w+)", errors.__doc__ or ""))
    assert defined == drawn | {"RefundAgentError"}


def test_no_exception_is_defined_outside_the_error_module():
    stray = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception"))
                    or isinstance(base, ast.Name) and base.id in {"RefundAgentError"}
                    for base in node.bases):
                stray.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert not stray


def test_the_public_api_is_what_the_examples_need():
    for example in (PACKAGE / "examples").glob("[!_]*.py"):
        for module in _imports(example):
            assert module in ("refund_agent", "__future__") or not module.startswith(
                "refund_agent"), (example.name, module)
    assert set(refund_agent.__all__) <= set(dir(refund_agent))


def test_every_package_folder_ships():
    """A sub-package missing from pyproject.toml's list installs without its modules."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    folders = {".".join(init.parent.relative_to(ROOT).parts)
               for base in (PACKAGE, STAND_IN) for init in base.rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
