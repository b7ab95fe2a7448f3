"""The layout keeps the architecture visible: a small core, the desk on top, the stand-in apart.

These read the source, not behaviour: they fail when a change quietly undoes the layout (a
desk import creeping into the loop, a boundary losing its home, a module growing past what a
reader takes in at once). The floors are checked by following every import reachable from
``loop.py`` and from each module of the loop's floors, transitively, lazy ones included, and by
importing the loop in a fresh interpreter.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import refund_agent
from refund_agent import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "refund_agent"
STAND_IN = ROOT / "offline_model"
# What sits above the loop (ARCHITECTURE.md, "Floors"): nothing beneath may reach it.
ABOVE = ("refund_agent.desk", "refund_agent.web", "refund_agent.cli", "refund_agent.evals",
         "refund_agent.examples")
# The loop's floors, each module of which is a starting point of its own (a module nothing in
# the loop imports today may still be imported by an agent of one's own).
FLOORS = ("store", "outside", "providers")
# The loop's top-level modules: what an agent of your own needs (``__main__`` is the CLI's).
TOP = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


# -- the import graph, read from the source --------------------------------------------------


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file that defines module ``name`` under ``root``, or None (not ours, or no such)."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


# The one import reached only by asking the package for a name, never by importing it: the
# refund desk's names that existing users import from ``refund_agent`` (its module __getattr__
# imports ``refund_agent.desk`` on first use). It is left out of the graph and checked on its own
# (test_the_desk_is_imported_as_the_desk); the fresh interpreter proves it is not loaded.
OLD_NAMES = "refund_agent"


def _absolute(module: str, level: int, package: str) -> str:
    """``module`` imported ``level`` dots up from ``package`` (0: absolute already)."""
    if not level:
        return module
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - level + 1])
    return f"{base}.{module}" if module else base


def _import_nodes(tree: ast.Module, old_names: bool) -> Iterable[ast.AST]:
    """Every node of ``tree``, the body of a module-level ``__getattr__`` only if asked."""
    for top in tree.body:
        if isinstance(top, ast.FunctionDef) and top.name == "__getattr__" and not old_names:
            continue
        yield from ast.walk(top)


def imports_of(name: str, root: Path = ROOT, *, old_names: bool = False) -> set[str]:
    """Every ``refund_agent`` module that loading module ``name`` may load, by one step.

    Every ``import`` and ``from ... import`` anywhere in the file counts: at the top, inside
    functions (the lazy ones run the moment that function is called), and under
    ``if TYPE_CHECKING:`` too (those never run, but a floor that names a desk type in its
    signatures still knows the desk: stricter than the interpreter, on purpose), as do
    ``importlib.import_module(...)`` calls with a literal name. Loading ``a.b.c`` loads ``a``
    and ``a.b`` first, so a module's own package is one of its imports: that is how
    ``refund_agent/__init__.py`` sits on every path. Only the package's own ``__getattr__``
    (see OLD_NAMES) is left out, unless ``old_names``.
    """
    path = module_file(name, root)
    if path is None:
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    if "." in name:
        found.add(name.rpartition(".")[0])
    tree = ast.parse(path.read_text(), str(path))
    for node in _import_nodes(tree, old_names or name != OLD_NAMES):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node.module or "", node.level, package)
            found.add(module)
            # ``from pkg import mod`` loads pkg.mod when mod is a module, not a name in pkg.
            found.update(f"{module}.{alias.name}" for alias in node.names
                         if module_file(f"{module}.{alias.name}", root) is not None)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
              == "import_module"):
            # import_module(".x", __name__) is relative to this module's package.
            text = node.args[0].value
            dots = len(text) - len(text.lstrip("."))
            found.add(_absolute(text[dots:], dots, package))
    loaded: set[str] = set()
    for module in found:
        # ``import a.b.c`` loads a, a.b and a.b.c; only this project's modules are followed.
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix.startswith("refund_agent") and module_file(prefix, root) is not None:
                loaded.add(prefix)
    loaded.discard(name)
    return loaded


def reachable(starts: Iterable[str], root: Path = ROOT) -> dict[str, str | None]:
    """Every module reachable from ``starts``, each with the module it was first reached
    from (breadth first: the chain back to a start is a shortest one)."""
    came_from: dict[str, str | None] = {}
    queue: deque[str] = deque()
    for start in starts:
        if start not in came_from:
            came_from[start] = None
            queue.append(start)
    while queue:
        name = queue.popleft()
        for imported in sorted(imports_of(name, root)):
            if imported not in came_from:
                came_from[imported] = name
                queue.append(imported)
    return came_from


def chain(came_from: dict[str, str | None], name: str) -> str:
    """How ``name`` was reached: ``start -> ... -> name``."""
    links = [name]
    while (previous := came_from[links[-1]]) is not None:
        links.append(previous)
    return " -> ".join(reversed(links))


def floor_modules(root: Path = ROOT) -> list[str]:
    """Every module of the loop's floors (store/, outside/, providers/, their sub-packages)."""
    names = []
    for floor in FLOORS:
        for path in sorted((root / "refund_agent" / floor).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def upward(starts: Iterable[str], root: Path = ROOT) -> list[str]:
    """The chain to each module above the loop that ``starts`` reach, one line each."""
    came_from = reachable(starts, root)
    return sorted(chain(came_from, name) for name in came_from if name.startswith(ABOVE))


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


# -- the floors ------------------------------------------------------------------------------


def test_the_reader_follows_lazy_imports_and_packages(tmp_path):
    """The reader itself: an import inside a function, a relative one, a parent package, and
    ``from pkg import module`` each count (a test that misses them proves nothing)."""
    pkg = tmp_path / "refund_agent"
    (pkg / "desk").mkdir(parents=True)
    (pkg / "store").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "desk" / "__init__.py").write_text("")
    (pkg / "desk" / "rules.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("from . import base\n")
    (pkg / "store" / "base.py").write_text("def f():\n    from ..desk import rules\n")
    (pkg / "loop.py").write_text("from .store import base\n")
    assert upward(["refund_agent.loop"], tmp_path) == [
        "refund_agent.loop -> refund_agent.store.base -> refund_agent.desk",
        "refund_agent.loop -> refund_agent.store.base -> refund_agent.desk.rules"]
    # Its package alone leads up too: store/__init__.py is loaded before store/base.py.
    (pkg / "store" / "base.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("import refund_agent.desk.rules\n")
    (pkg / "loop.py").write_text("def f():\n    import refund_agent.store.base\n")
    assert upward(["refund_agent.loop"], tmp_path)[-1] == (
        "refund_agent.loop -> refund_agent.store -> refund_agent.desk.rules")


def test_nothing_reachable_from_the_loop_imports_what_stands_on_it():
    """Every import reachable from loop.py (and from the package's other top-level modules,
    which an agent of one's own may import on their own), lazy ones too: none reaches the
    desk, the page, the terminal, the evals or the examples. ``__main__.py`` is the terminal's
    entry point (``python -m refund_agent``), above the loop by design."""
    found = upward(["refund_agent", "refund_agent.loop", *(f"refund_agent.{name}" for name in TOP)])
    assert not found, "imports reaching above the loop:\n" + "\n".join(found)


def test_no_module_of_the_floors_imports_what_stands_on_them():
    """Every module of store/, outside/ and providers/, each followed all the way down."""
    found = upward(floor_modules())
    assert not found, "imports reaching above the loop:\n" + "\n".join(found)


def test_a_fresh_interpreter_imports_the_loop_without_the_house():
    """``import refund_agent`` and ``import refund_agent.loop`` load no module of the desk,
    the page or the terminal (the interpreter's own word, beside the source's)."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import refund_agent, refund_agent.loop, sys; "
         "print(sorted(m for m in sys.modules if m.startswith('refund_agent')))"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    names = ast.literal_eval(loaded.strip())
    assert "refund_agent.loop" in names
    above = [name for name in names if name.startswith(ABOVE)]
    assert not above, above


def test_the_desk_is_imported_as_the_desk():
    """The refund desk's names come from ``refund_agent.desk``; the package's own, read on
    first use (its module __getattr__), stay for existing users, and that __getattr__ is the
    only way from the package to the desk."""
    import refund_agent.desk as desk
    assert set(desk.__all__) <= set(dir(desk))
    assert refund_agent.Agent is desk.Agent
    assert not set(refund_agent.__all__) & set(desk.__all__)
    assert imports_of(OLD_NAMES, old_names=True) - imports_of(OLD_NAMES) == {"refund_agent.desk"}


def test_the_top_level_modules_import_nothing_of_the_stand_in():
    """The stand-in is started by providers/ (lazily), never by the loop's own modules."""
    wrong = {name: sorted(m for m in _imports(PACKAGE / f"{name}.py")
                          if m.startswith("offline_model"))
             for name in TOP}
    assert not {name: found for name, found in wrong.items() if found}


# -- the rest of the layout ------------------------------------------------------------------


def test_the_package_has_a_dozen_top_level_modules_at_most():
    assert len(list(PACKAGE.glob("*.py"))) <= 12


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
    assert defined == drawn | {"AgentError", "RefundAgentError"}   # the root, and its alias


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
            # The public API, or what the examples share among themselves (records.py).
            assert module in ("refund_agent", "__future__") or not module.startswith(
                "refund_agent") or module.startswith("refund_agent.examples"), (
                example.name, module)
    assert set(refund_agent.__all__) <= set(dir(refund_agent))


def test_every_package_folder_ships():
    """A sub-package missing from pyproject.toml's list installs without its modules."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    folders = {".".join(init.parent.relative_to(ROOT).parts)
               for base in (PACKAGE, STAND_IN) for init in base.rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)


# -- the loop's own tests need nothing of the desk ----------------------------------------------

TESTS = ROOT / "tests"
# What the loop's tests may not import: the desk, the page, the terminal (whose fork server
# preloads the desk), directly, through a helper, or through the package's old desk names.
DESK_SIDE = ("refund_agent.desk", "refund_agent.web", "refund_agent.cli")
# tests/conftest.py's fixtures that make the desk's Agent (or run its terminal).
DESK_FIXTURES = {"agent", "scripted", "baselines"}
# The one desk import allowed: the layout test above checks that the package's old desk names
# are the desk's own (test_the_desk_is_imported_as_the_desk), which needs the desk to compare.
LAYOUT_CHECKS_THE_DESK = ("tests/loop/test_layout.py", "refund_agent.desk")


def _test_imports(path: Path, helpers: Path) -> set[str]:
    """Every module ``path`` imports, lazy ones and those of the Python snippets it runs in
    new processes (string constants that parse as code) too; ``helpers``' relative imports
    resolved, and ``from refund_agent import <a desk name>`` counted as the desk. (This file's
    own snippets are the readers' test data, not code it runs: left out.)"""
    tree = ast.parse(path.read_text(), str(path))
    runs_snippets = path.resolve() != Path(__file__).resolve()
    trees = [tree] + [snippet for node in ast.walk(tree)
                      if runs_snippets and isinstance(node, ast.Constant)
                      and isinstance(node.value, str)
                      and "import " in node.value and (snippet := _parsed(node.value))]
    found: set[str] = set()
    in_helpers = path.parent == helpers
    for node in (n for t in trees for n in ast.walk(t)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level and in_helpers:
                module = ".".join(filter(None, ["helpers", module]))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names
                         if module == "helpers" or (module == "refund_agent"
                                                    and alias.name in refund_agent._DESK))
    return {("refund_agent.desk" if name.startswith("refund_agent.") and
             name.rpartition(".")[2] in refund_agent._DESK else name) for name in found}


def _parsed(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def desk_imports(files: Iterable[Path], helpers: Path = TESTS / "helpers") -> list[str]:
    """``file -> helpers.x -> ... -> module`` for each import of :data:`DESK_SIDE` the files
    reach, following ``helpers.*`` imports transitively."""
    found = []
    for start in files:
        came_from: dict[Path, Path | None] = {start: None}
        queue = deque([start])
        while queue:
            path = queue.popleft()
            for module in sorted(_test_imports(path, helpers)):
                if module.startswith(DESK_SIDE):
                    where = [path]
                    while (before := came_from[where[-1]]) is not None:
                        where.append(before)
                    names = [p.name for p in reversed(where)]
                    found.append(" -> ".join([*names, module]))
                elif module.startswith("helpers."):
                    helper = helpers / f"{module.split('.')[1]}.py"
                    if helper.is_file() and helper not in came_from:
                        came_from[helper] = path
                        queue.append(helper)
    return found


def test_the_desk_import_reader_follows_helpers_snippets_and_old_names(tmp_path):
    """The reader itself: a helper importing a helper that imports the terminal lazily, a
    snippet run in a new process, and a desk name asked of the package each count."""
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "a.py").write_text("from . import b\n")
    (helpers / "b.py").write_text("def f():\n    import refund_agent.cli\n")
    test = tmp_path / "test_x.py"
    test.write_text("from helpers import a\nfrom refund_agent import Agent, Loop\n"
                    "CODE = 'import sys\\nfrom refund_agent.web import views\\n'\n")
    assert sorted(desk_imports([test], helpers)) == [
        "test_x.py -> a.py -> b.py -> refund_agent.cli",
        "test_x.py -> refund_agent.desk", "test_x.py -> refund_agent.web"]


def test_the_loops_tests_import_nothing_of_the_desk():
    """tests/loop (and the small agent it runs on) imports nothing of the desk, the page or the
    terminal, directly or through tests/helpers: the loop is tested on its own. The desk's
    behaviour through the loop is tested in tests/desk."""
    files = [*sorted((TESTS / "loop").glob("*.py")), TESTS / "helpers" / "credit.py"]
    found = [line for line in desk_imports(files)
             if line != " -> ".join([Path(LAYOUT_CHECKS_THE_DESK[0]).name,
                                     LAYOUT_CHECKS_THE_DESK[1]])]
    assert not found, "the loop's tests reach the desk:\n" + "\n".join(found)


def test_the_loops_tests_use_no_fixture_of_the_desk():
    """Nor the root conftest's fixtures that make the desk's Agent; tests/loop/conftest.py has
    the small agent's (``credit``, ``scripted_credit``)."""
    root = ast.parse((TESTS / "conftest.py").read_text())
    defined = {node.name for node in ast.walk(root) if isinstance(node, ast.FunctionDef)}
    assert DESK_FIXTURES <= defined and "Agent(" in (TESTS / "conftest.py").read_text()
    wrong = [f"{path.name}::{node.name}({arg.arg})"
             for path in sorted((TESTS / "loop").glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef)
             for arg in node.args.args if arg.arg in DESK_FIXTURES]
    assert not wrong, wrong
