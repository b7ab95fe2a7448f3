"""The benchmark's JSON-file store must keep step with the real Store's interface.

CI runs ``bench/run.py --quick`` after the suite; a signature that drifted (a new keyword on
``Store.decide``) failed there, after fourteen minutes of green tests. This catches it first.
"""
import inspect
import sys
from pathlib import Path

from refund_agent.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from jsonstate import JsonStateStore  # noqa: E402


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")}


def test_json_store_accepts_every_argument_the_agent_passes() -> None:
    real, bench = _public_methods(Store), _public_methods(JsonStateStore)
    drifted = []
    for name, signature in bench.items():
        if name not in real:
            continue
        # ``db`` is the real store's own connection, passed only from inside it.
        wanted = set(real[name].parameters) - {"self", "db"}
        missing = wanted - set(signature.parameters)
        if missing:
            drifted.append(f"{name}: missing {sorted(missing)}")
    assert not drifted, drifted
