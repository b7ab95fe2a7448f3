"""The stand-in is a package of its own: it imports nothing of the agent, serves its own copy of
the model catalogue (held to the agent's table here), is loaded only when no key is set, and
its scripted test model fails a test that leaves script steps unused."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

import offline_model
from offline_model import Reply, start_offline_server
from offline_model import models as served
from offline_model.testing import ScriptedBrain, UnusedSteps, every_script_used
from refund_agent.providers import table

PACKAGE = Path(offline_model.__file__).parent
ROOT = PACKAGE.parent


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (a lazy import inside a function counts)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_the_stand_in_imports_nothing_of_the_agent():
    agent = [f"{path.name}:{line}: {name}" for path in sorted(PACKAGE.glob("*.py"))
             for line, name in _imports(path) if name.split(".")[0] == "refund_agent"]
    assert agent == []


def test_its_model_catalogue_agrees_with_the_agents_table():
    """A copy on purpose (offline_model/models.py says why); where both list a model, they
    say the same about it, and a name resolves to the same entry in both."""
    agents = {m.pattern: m for m in table.MODELS}
    both = [m for m in served.MODELS if m.pattern in agents]
    assert len(both) >= 10   # the copy is the catalogue, not a stub
    for mine in both:
        theirs = agents[mine.pattern]
        assert (mine.provider, mine.efforts, mine.encrypted_by_default) == (
            theirs.provider, theirs.efforts, theirs.encrypted_by_default), mine.pattern
        name = mine.pattern.replace("*", "0309-reasoning")
        assert served.model_info(name).pattern == table.model_info(name).pattern, name


def test_with_a_key_the_agent_never_loads_the_stand_in(tmp_path):
    """Importing the agent and opening the provider's client leave the stand-in unloaded."""
    code = textwrap.dedent("""
        import sys
        import refund_agent
        from refund_agent.config import load_settings
        from refund_agent.providers.client import open_model
        model = open_model(load_settings())
        assert model.server is None, model
        print(sorted(m for m in sys.modules if m.split(".")[0] == "offline_model"))
    """)
    env = {**os.environ, "XAI_API_KEY": "xai-dummy-not-a-key", "PYTHONPATH": str(ROOT),
           "REFUND_AGENT_PROVIDER": "xai", "REFUND_AGENT_OFFLINE_URL": ""}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _ask(server, text: str = "Where is A1?"):
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    return client.responses.create(model="grok-4.7", input=text)


def test_a_script_step_left_unused_fails(tmp_path):
    """Three steps, two requests: the third step is named, by every way of checking."""
    steps = (Reply("look", calls=[("lookup", {"id": "A1"})]), Reply("say", "Found it."),
             Reply("never asked", "This step is spare."))
    brain = ScriptedBrain(*steps)
    with start_offline_server(tmp_path / "r.sqlite3", brain=brain) as server:
        _ask(server)
        _ask(server)
    with pytest.raises(UnusedSteps) as caught:
        brain.assert_all_used()
    assert "1 of 3 script steps were never asked for" in str(caught.value)
    assert "step 3: Reply(reasoning='never asked'" in str(caught.value)
    with pytest.raises(UnusedSteps), ScriptedBrain(Reply("spare")):
        pass
    with pytest.raises(UnusedSteps, match="step 2: Reply"), every_script_used():
        ScriptedBrain(Reply("one"), Reply("two"))
    spare = ScriptedBrain(Reply("spare"))
    with pytest.raises(ValueError), spare:   # a failure under way is not masked...
        raise ValueError
    with pytest.raises(UnusedSteps):          # ...and the spare step is still there to report
        spare.assert_all_used()


def test_a_script_used_up_passes_and_then_finishes(tmp_path):
    brain = ScriptedBrain(Reply("look", calls=[("lookup", {"id": "A1"})]))
    with brain, start_offline_server(tmp_path / "r.sqlite3", brain=brain) as server:
        assert _ask(server).output[-1].type == "function_call"
        assert _ask(server).output_text == "Finished."
    assert len(brain.seen) == 2


def test_the_package_docstring_example_runs(tmp_path):
    """The example a stranger copies from ``offline_model``'s docstring works as written."""
    after = offline_model.__doc__.split("::\n", 1)[1].splitlines()
    block = [line for line in after[:next(i for i, line in enumerate(after)
                                          if line and not line.startswith("    "))]]
    example = textwrap.dedent("\n".join(block))
    assert "start_offline_server" in example and "ScriptedBrain" in example
    example = example.replace("...  # your client's requests",
                              "response = client.responses.create(model='grok-4.7', input='hi')"
                              "  #")
    scope = {"tmp_path": tmp_path, "openai": openai}
    exec(compile(example, "offline_model docstring", "exec"), scope)
    (call,) = [item for item in scope["response"].output if item.type == "function_call"]
    assert call.name == "lookup"
    assert sorted(offline_model.__all__) == ["OfflineServer", "Reply", "start_offline_server"]
