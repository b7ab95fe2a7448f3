"""This project beside the OpenAI Agents SDK and LangGraph: the same scenario, one offline server.

    pip install -e ".[peers]"            # the frameworks (not needed by the project or its CI)
    python bench/peers.py --quick        # about 1-2 minutes
    python bench/peers.py                # medians of 40 scenarios per configuration
    python bench/peers.py --json bench/peers.json --markdown docs/peers-table.md --plot docs

The scenario is Maya's (data/sample-emails.json, "damaged"): her email, three model requests,
a pause for approval, the approval, two more requests (the refund, then the email to her).
Every configuration runs it against the same offline Responses API server, started here as
bench/run.py's recovery item does and reached over loopback by the real openai SDK at zero
latency, so everything outside the model shows. Each configuration lives in its own worker
process; the scenarios are interleaved (one per configuration in turn) and the order is rotated
every round, so a noisy neighbour on a shared machine hits every configuration alike. Results
are medians and ratios taken in one run.

Configurations:

- ``project``: refund-agent's own Agent (previous_response_id, SQLite store; nobody watches,
  so each reply is asked for whole, as the peers ask for theirs).
- ``sdk``: the Agents SDK as its human-in-the-loop guide shows it: ``needs_approval=True`` on
  the refund tool, ``Runner.run``, ``result.to_state()``, the state written to a JSON file with
  ``Path.write_text``, read back with ``RunState.from_json``, ``state.approve``, ``Runner.run``.
  ``sdk-chained`` adds ``auto_previous_response_id=True``; ``*-fsync`` writes the state file
  to a temporary name, fsyncs it, renames it and fsyncs the folder (equal durability).
- ``langgraph``: a StateGraph with a model node (the openai SDK's ``responses.create``) and a
  tool node that calls ``interrupt()`` before paying, a ``SqliteSaver`` checkpointer, resumed
  with ``Command(resume=...)``; ``langgraph-chained`` sends only the new items with
  ``previous_response_id``; ``*-sync`` passes ``durability="sync"`` (the default is "async").

Every peer uses the project's own tool functions and stand-ins: ``ShopTools`` for
lookup_order and check_refund_policy, ``policy.quote_refund`` through ``ShopTools.quote``, the
payments stand-in (refunds.log) and the email outbox (outbox.log), both keyed by the call id as
the project keys them, and the same tool JSON schemas and system prompt (sent as the first
input item, since xAI refuses ``instructions`` together with ``previous_response_id``).

What is measured, per configuration (see docs/PERFORMANCE.md for the discussion):

- wall per scenario (p50): from the email to the finished run, the approval included.
- client CPU per request inside the model call: the calling thread's CPU time
  (``time.thread_time``) inside ``responses.create`` (for the project: from the call until the
  stream's last event): building the request, HTTP, parsing the answer.
- harness CPU per turn: the worker process's CPU (``time.process_time``, every thread, so
  background checkpoint writers count) over the scenario, less the above, per model request.
- fsyncs per scenario: every fsync() and fdatasync() the worker process makes, SQLite's
  included, counted by a 10-line C shim loaded with LD_PRELOAD that wraps both libc calls
  (compiled here with the system's C compiler; without one, only Python's os.fsync and
  os.fdatasync are counted and the table says so).
- bytes sent on the last request: the HTTP body, counted by an httpx event hook.
- state stored at the pause: what the configuration keeps to continue the run (the SDK's JSON
  file; LangGraph's checkpoint and write blobs for the thread; the project's rows for the run).
- find waiting runs among N paused runs (N copies of a paused run seeded per configuration).
- two approvers at once: two processes approve the same paused run at the same moment; how
  many times the refund tool ran, and how many emails went out.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PEER_MODULES = {"agents": "openai-agents", "langgraph": "langgraph",
                "langgraph.checkpoint.sqlite": "langgraph-checkpoint-sqlite"}
INSTALL_HINT = ('The peers are optional; install them with\n\n    pip install -e ".[peers]"\n\n'
                "(openai-agents, langgraph and langgraph-checkpoint-sqlite), then run "
                "python bench/peers.py --quick again.")

CONFIGS = ["project", "sdk", "sdk-chained", "sdk-fsync", "sdk-chained-fsync",
           "langgraph", "langgraph-chained", "langgraph-sync", "langgraph-chained-sync"]
FAMILY = {"project": "project", "sdk": "sdk", "langgraph": "langgraph"}
APPROVER = "Bench approver"
MODEL = "grok-4.7"

SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
static volatile long count;
long refund_bench_fsyncs(void) { return __atomic_load_n(&count, __ATOMIC_SEQ_CST); }
int fsync(int fd) { static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  __atomic_add_fetch(&count, 1, __ATOMIC_SEQ_CST); return real(fd); }
int fdatasync(int fd) { static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  __atomic_add_fetch(&count, 1, __ATOMIC_SEQ_CST); return real(fd); }
"""


def copy_ids(ids: list[str], copy: int) -> dict[str, str]:
    """The ids of seeded copy number ``copy`` of a paused run: one new id per old id.

    Each new id carries the old id's position among ``ids``, so no two old ids share a new
    one (keeping a tail of the old id instead, ``old[12:]``, gave ``call-3212cd54-0`` and
    ``call-9f0e1a54-0`` the same new id and the calls one key, in about half the runs). The
    prefix (``run_``, ``call``, ``resp``) stays so the copies read like the original.
    """
    return {old: f"{old[:4]}s{copy:07d}n{j}" if len(old) > 12 else f"S{copy:07d}n{j}"
            for j, old in enumerate(ids)}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def peers_missing() -> list[str]:
    import importlib.util
    missing = []
    for name, package in PEER_MODULES.items():
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(package)
        except ModuleNotFoundError:
            missing.append(package)
    return missing


def build_shim(folder: Path) -> Path | None:
    """The fsync-counting shim, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, lib = folder / "fsync_count.c", folder / "fsync_count.so"
    src.write_text(SHIM_C)
    done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"],
                          capture_output=True, text=True)
    return lib if done.returncode == 0 else None


# ==============================================================================================
# worker side: one configuration, in its own process
# ==============================================================================================

class FsyncCounter:
    def __init__(self) -> None:
        self.python_only = True
        self._py = 0
        self._fn = None
        lib = os.environ.get("REFUND_BENCH_SHIM")
        if lib:
            fn = ctypes.CDLL(lib).refund_bench_fsyncs
            fn.restype = ctypes.c_long
            self._fn, self.python_only = fn, False
        else:  # count Python's own calls at least
            for name in ("fsync", "fdatasync"):
                real = getattr(os, name)

                def counted(fd: int, _real=real) -> None:
                    self._py += 1
                    return _real(fd)
                setattr(os, name, counted)

    def __call__(self) -> int:
        return self._fn() if self._fn is not None else self._py


class Worker:
    """What every configuration shares: the shop, the stand-ins, the meters."""

    # The async client's retries and httpx options (bench/burst_peers.py sets them for a
    # burst); none here, where one scenario runs at a time.
    retries = 0
    http_options: dict[str, Any] = {}

    def __init__(self, config: str, out: Path, data: Path, base_url: str, first_order: int,
                 counter_file: Path | None = None) -> None:
        from benchlib import clone_id

        from refund_agent.desk.shop import Shop
        from refund_agent.outside import StandInOutbox as Outbox
        from refund_agent.outside import StandInPayments as Payments

        self.config, self.out, self.data, self.base_url = config, out, data, base_url
        self.family = config.split("-")[0]
        self.chained = "chained" in config
        self.durable = config.endswith("-fsync") or config.endswith("-sync")
        out.mkdir(parents=True, exist_ok=True)
        self.shop = Shop(data)
        self.payments, self.outbox = Payments(out), Outbox(out)
        self.fsyncs = FsyncCounter()
        self.next_order, self.clone_id = first_order, clone_id
        self.counter_file = counter_file
        self.model_cpu: list[float] = []
        self.sent: list[int] = []

    def take_order(self) -> str:
        self.next_order += 1
        return self.clone_id(self.next_order - 1)

    # -- the project's tool functions, for the peers ----------------------------------------

    def tools(self, sender: str):
        from refund_agent.desk.tools import ShopTools
        return ShopTools(self.shop, sender, lambda _order: {})

    def read_tool(self, name: str, sender: str, arguments: str) -> str:
        from refund_agent.desk.tools import parse_args
        from refund_agent.tools import as_output
        args = parse_args(name, arguments)
        if isinstance(args, str):
            return as_output({"error": args})
        return as_output(getattr(self.tools(sender), name)(args))

    def pay(self, sender: str, call_id: str, arguments: str, approved_by: str) -> str:
        """issue_refund once approved: price with the policy, pay through the stand-in."""
        from refund_agent.desk.actions import payment_request
        from refund_agent.desk.tools import parse_args
        from refund_agent.tools import as_output
        if self.counter_file is not None:
            with open(self.counter_file, "a") as fh:
                fh.write(f"refund {os.getpid()} {call_id}\n")
        args = parse_args("issue_refund", arguments)
        if isinstance(args, str):
            return as_output({"error": args})
        quote = self.tools(sender).quote(args, {})
        if isinstance(quote, str):
            return as_output({"error": quote})
        refund, _reused = self.payments.refund(payment_request(call_id, quote, args.summary))
        lines = [{"line": q.line, "item": q.name, "reason": q.reason, "amount": q.amount}
                 for q in quote.lines]
        return as_output({"status": "refunded", "refund_id": refund["refund_id"],
                          "amount": quote.amount, "approved_by": approved_by, "lines": lines})

    def email(self, sender: str, subject: str, call_id: str, arguments: str) -> str:
        from refund_agent.desk.tools import parse_args
        from refund_agent.outside import with_signature
        from refund_agent.tools import as_output
        args = parse_args("send_customer_message", arguments)
        if isinstance(args, str):
            return as_output({"error": args})
        body = with_signature(args.message, self.shop.info.signature)
        record, _ = self.outbox.send(call_id, sender, f"Re: {subject}", body)
        return as_output({"status": "sent", "to": sender, "message_id": record["message_id"]})

    def first_input(self, order_id: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        from benchlib import email_for

        from refund_agent.desk.prompts import system_prompt
        sender, name, subject = "maya.chen@example.com", "Maya Chen", "Coffee maker arrived cracked"
        email = f"From: {name} <{sender}>\nSubject: {subject}\n\n{email_for(order_id)}"
        system = {"type": "message", "role": "system",
                  "content": system_prompt(self.shop.info.name, self.shop.today)}
        return ([system, {"type": "message", "role": "user", "content": email}],
                {"sender": sender, "subject": subject})

    # -- approving: what the approver loads first, then the click --------------------------

    def prepare(self, handle: str) -> Any:
        raise NotImplementedError

    def go(self, prepared: Any) -> str:
        raise NotImplementedError

    def approve(self, handle: str) -> str:
        return self.go(self.prepare(handle))

    # -- one scenario, measured --------------------------------------------------------------

    def scenario(self) -> dict[str, Any]:
        n_cpu, n_sent = len(self.model_cpu), len(self.sent)
        f0 = self.fsyncs()
        t0, c0 = time.perf_counter(), time.process_time()
        info = self.run_scenario(self.take_order())
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        model_cpu = self.model_cpu[n_cpu:]
        return {"wall": wall, "cpu": cpu, "requests": len(model_cpu),
                "model_cpu": model_cpu, "harness_cpu_per_turn": (cpu - sum(model_cpu))
                / max(len(model_cpu), 1), "fsyncs": self.fsyncs() - f0,
                "last_request_bytes": self.sent[-1] if len(self.sent) > n_sent else None,
                **info}


class ProjectWorker(Worker):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        import httpx2
        import openai
        from benchlib import TimedAgent

        from refund_agent import Settings
        from refund_agent.providers.client import ModelAccess

        settings = Settings(api_key="bench-offline-model", base_url=self.base_url, model=MODEL,
                            data_dir=self.data, output_dir=self.out, max_retries=0, timeout=60.0)
        http = httpx2.Client(event_hooks={"request": [lambda r: self.sent.append(len(r.content))]})
        client = openai.OpenAI(base_url=self.base_url, api_key="bench", max_retries=0,
                               timeout=60.0, http_client=http)
        self.agent = TimedAgent(settings, model=ModelAccess(client, "offline (bench)", None))
        import inspect
        tx, self.commits = self.agent.store._tx, [0, 0]  # noqa: SLF001 - only counted
        graded = "durable" in inspect.signature(tx).parameters  # older stores: all durable

        def counted(durable: bool = True) -> Any:
            self.commits[0] += 1
            self.commits[1] += durable
            return tx(durable) if graded else tx()
        self.agent.store._tx = counted  # type: ignore[method-assign]
        if self.counter_file is not None:  # the race: count the refund tool's runs, as for peers
            refund, counter = self.agent.payments.refund, self.counter_file

            def counted(request: Any, *a: Any, **kw: Any) -> Any:
                with open(counter, "a") as fh:   # a RefundRequest names its key
                    fh.write(f"refund {os.getpid()} {getattr(request, 'key', request)}\n")
                return refund(request, *a, **kw)
            self.agent.payments.refund = counted  # type: ignore[method-assign]

    def run_scenario(self, order_id: str) -> dict[str, Any]:
        before = list(self.commits)
        run_id = self.pause(order_id)
        self.approve(run_id)
        return {"store_commits": self.commits[0] - before[0],
                "durable_store_commits": self.commits[1] - before[1]}

    def pause(self, order_id: str) -> str:
        from benchlib import start_ticket

        from refund_agent import RunStatus
        spans = len(self.agent.spans)
        run = self.agent.advance(start_ticket(self.agent, order_id).id)
        assert run.status == RunStatus.WAITING, (run.status, run.error)
        self.model_cpu += [s.cpu for s in self.agent.spans[spans:]]
        return run.id

    def prepare(self, run_id: str) -> tuple[str, str]:
        """What an approver has on screen before clicking: the pending approval's id."""
        from benchlib import pending_approval_id
        return run_id, pending_approval_id(self.agent, run_id)

    def go(self, prepared: tuple[str, str]) -> str:
        from refund_agent import RunStatus
        from refund_agent.errors import AlreadyDecided
        run_id, approval_id = prepared
        spans = len(self.agent.spans)
        try:
            self.agent.decide(approval_id, True, APPROVER,
                              fingerprint=self.agent.store.approval(approval_id).fingerprint)
        except AlreadyDecided:
            return "lost the race (already decided)"
        run = self.agent.advance(run_id)
        assert run.status == RunStatus.DONE, (run.status, run.error)
        self.model_cpu += [s.cpu for s in self.agent.spans[spans:]]
        return "done"

    def state_bytes(self, run_id: str) -> int:
        db = self.agent.store._db()  # noqa: SLF001 - measuring what is stored
        total = 0
        for table, col in (("runs", "id"), ("steps", "run_id"), ("calls", "run_id"),
                           ("approvals", "run_id"), ("audit", "run_id")):
            rows = db.execute(f"SELECT * FROM {table} WHERE {col} = ?", (run_id,)).fetchall()
            total += len(json.dumps([dict(r) for r in rows]))
        rows = db.execute("SELECT l.* FROM approval_lines l JOIN approvals a ON"
                          " a.id = l.approval_id WHERE a.run_id = ?", (run_id,)).fetchall()
        return total + len(json.dumps([dict(r) for r in rows]))

    def seed(self, run_id: str, n: int) -> None:
        """``n`` copies of a paused run (runs, steps, calls, approval and its lines)."""
        db = self.agent.store._db()  # noqa: SLF001 - bulk seeding needs the raw connection
        run = dict(db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone())
        approval = dict(db.execute("SELECT * FROM approvals WHERE run_id = ?",
                                   (run_id,)).fetchone())
        calls = [dict(r) for r in db.execute("SELECT * FROM calls WHERE run_id = ?", (run_id,))]
        ids = sorted({run_id, approval["order_id"], *(c["call_id"] for c in calls),
                      *(c["response_id"] for c in calls), run["last_response_id"]},
                     key=len, reverse=True)
        tables = {
            "runs": [run],
            "steps": [{k: v for k, v in dict(r).items() if k != "id"}
                      for r in db.execute("SELECT * FROM steps WHERE run_id = ?", (run_id,))],
            "calls": calls, "approvals": [approval],
            "approval_lines": [dict(r) for r in db.execute(
                "SELECT * FROM approval_lines WHERE approval_id = ?", (approval["id"],))]}
        db.execute("BEGIN IMMEDIATE")
        for i in range(n):
            new = copy_ids(ids, i)

            def swap(v: Any, new: dict[str, str] = new) -> Any:
                if isinstance(v, str):
                    for old, repl in new.items():
                        v = v.replace(old, repl)
                return v
            for table, rows in tables.items():
                for row in rows:
                    row = {k: swap(v) for k, v in row.items()}
                    db.execute(f"INSERT INTO {table}({','.join(row)}) VALUES "
                               f"({','.join('?' * len(row))})", tuple(row.values()))
        db.execute("COMMIT")

    def find_waiting(self) -> int:
        """All of them, as the typed approvals the queue shows (by an index on the status)."""
        from refund_agent.desk.records import DeskStore
        store = DeskStore(self.agent.settings.db_path)  # a fresh connection, as a new page would
        try:
            return len(store.approvals("pending", limit=1_000_000))
        finally:
            store.close()

    def first_page(self) -> float:
        """The approval queue as the page shows it: its first 200, oldest first."""
        from refund_agent.desk.records import DeskStore
        store = DeskStore(self.agent.settings.db_path)
        try:
            t0 = time.perf_counter()
            store.approvals("pending")
            return time.perf_counter() - t0
        finally:
            store.close()


class SdkWorker(Worker):
    """The Agents SDK, as its human-in-the-loop guide shows it."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        import httpx2
        from agents import (
            Agent,
            FunctionTool,
            ModelSettings,
            OpenAIResponsesModel,
            set_tracing_disabled,
        )
        from openai import AsyncOpenAI
        from openai.types.shared import Reasoning

        from refund_agent.desk.tools import tool_schemas

        set_tracing_disabled(True)  # no network here; the default exporter would try to upload

        async def hook(request: Any) -> None:
            self.sent.append(len(request.content))
        client = AsyncOpenAI(base_url=self.base_url, api_key="bench", max_retries=self.retries,
                             timeout=60.0, http_client=httpx2.AsyncClient(
                                 event_hooks={"request": [hook]}, **self.http_options))
        create = client.responses.create

        async def timed_create(*args: Any, **kwargs: Any) -> Any:
            c0 = time.thread_time()
            try:
                return await create(*args, **kwargs)
            finally:
                self.model_cpu.append(time.thread_time() - c0)
        client.responses.create = timed_create  # type: ignore[method-assign]
        worker = self

        def make(schema: dict[str, Any]) -> Any:
            name = schema["name"]

            async def invoke(ctx: Any, arguments: str) -> str:
                who = ctx.context
                if name == "issue_refund":
                    return worker.pay(who["sender"], ctx.tool_call_id, arguments, APPROVER)
                if name == "send_customer_message":
                    return worker.email(who["sender"], who["subject"], ctx.tool_call_id,
                                        arguments)
                return worker.read_tool(name, who["sender"], arguments)
            return FunctionTool(name=name, description=schema["description"],
                                params_json_schema=schema["parameters"], on_invoke_tool=invoke,
                                strict_json_schema=True,
                                needs_approval=name == "issue_refund")

        self.agent = Agent(
            name="Refund desk", instructions=None, tools=[make(s) for s in tool_schemas()],
            model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=ModelSettings(parallel_tool_calls=False,
                                         reasoning=Reasoning(effort="low")))
        self.states = self.out / "sdk-state"
        self.states.mkdir(exist_ok=True)
        self.loop = asyncio.new_event_loop()

    def write_state(self, path: Path, text: str) -> None:
        if not self.durable:
            path.write_text(text)  # as the guide does
            return
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def pause(self, order_id: str) -> str:
        return self.loop.run_until_complete(self._pause(order_id))

    async def _pause(self, order_id: str) -> str:
        from agents import Runner
        items, context = self.first_input(order_id)
        result = await Runner.run(self.agent, items, context=context, max_turns=12,
                                  auto_previous_response_id=self.chained)
        assert result.interruptions, result.final_output
        run_id = "sdk_" + uuid.uuid4().hex[:12]
        self.write_state(self.states / f"{run_id}.json", result.to_state().to_string())
        return run_id

    def prepare(self, run_id: str) -> tuple[Path, Any]:
        """The stored state, loaded as the guide does (``RunState.from_json``)."""
        from agents import RunState
        path = self.states / f"{run_id}.json"
        return path, self.loop.run_until_complete(
            RunState.from_json(self.agent, json.loads(path.read_text())))

    def go(self, prepared: tuple[Path, Any]) -> str:
        return self.loop.run_until_complete(self._go(*prepared))

    async def _go(self, path: Path, state: Any) -> str:
        from agents import Runner
        for interruption in state.get_interruptions():
            state.approve(interruption)
        result = await Runner.run(self.agent, state, max_turns=12)
        assert not result.interruptions and result.final_output, result
        # The run is finished: its state is no longer waiting for anyone.
        path.unlink(missing_ok=True)
        if self.durable:
            fd = os.open(self.states, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return "done"

    def run_scenario(self, order_id: str) -> dict[str, Any]:
        self.approve(self.pause(order_id))
        return {}

    def state_bytes(self, run_id: str) -> int:
        return (self.states / f"{run_id}.json").stat().st_size

    def seed(self, run_id: str, n: int) -> None:
        text = (self.states / f"{run_id}.json").read_text()
        for i in range(n):
            (self.states / f"seed_{i:07d}.json").write_text(text)

    def find_waiting(self) -> int:
        """Every stored state read and parsed; the ones with a pending approval counted.

        (The guide stores one state per paused run; nothing indexes them. Parsing the JSON and
        looking at its ``current_step`` is cheaper than ``RunState.from_json`` for each.)
        """
        waiting = 0
        for path in self.states.iterdir():
            if path.suffix == ".json":
                step = json.loads(path.read_text()).get("current_step") or {}
                waiting += step.get("type") == "next_step_interruption"
        return waiting


class GraphState(TypedDict, total=False):
    """The LangGraph peer's state (module level: LangGraph reads its type hints)."""

    history: Annotated[list, operator.add]  # every input and output item so far
    new: list                                # items not sent yet (chained mode)
    calls: list                              # the last response's function calls
    last_response_id: str | None
    sender: str
    subject: str


def model_and_tools_graph(model: Any, tools: Any) -> Any:
    """The graph every LangGraph configuration runs (here and in burst_peers.py): the model
    node, then the tool node while the model calls tools, then the model again."""
    from langgraph.graph import END, START, StateGraph

    def route(state: GraphState) -> str:
        return "tools" if state.get("calls") else END

    graph = StateGraph(GraphState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


class LangGraphWorker(Worker):
    """A LangGraph StateGraph: a model node and a tool node that interrupts before paying."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        import sqlite3

        import httpx2
        import openai
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.types import interrupt

        from refund_agent.desk.tools import tool_schemas

        http = httpx2.Client(event_hooks={"request": [lambda r: self.sent.append(len(r.content))]})
        client = openai.OpenAI(base_url=self.base_url, api_key="bench", max_retries=0,
                               timeout=60.0, http_client=http)
        chained, worker = self.chained, self

        def model(state: GraphState) -> dict[str, Any]:
            params: dict[str, Any] = {"model": MODEL, "tools": tool_schemas(),
                                      "parallel_tool_calls": False,
                                      "reasoning": {"effort": "low"}}
            if chained and state.get("last_response_id"):
                params.update(input=state["new"], previous_response_id=state["last_response_id"])
            else:
                params["input"] = state["history"]
            c0 = time.thread_time()
            try:
                response = client.responses.create(**params)
            finally:
                worker.model_cpu.append(time.thread_time() - c0)
            output = [item.model_dump(exclude_none=True) for item in response.output]
            calls = [o for o in output if o["type"] == "function_call"]
            return {"history": output, "new": [], "calls": calls,
                    "last_response_id": response.id}

        def tools(state: GraphState) -> dict[str, Any]:
            outputs = []
            for call in state["calls"]:
                name, args, call_id = call["name"], call["arguments"], call["call_id"]
                if name == "issue_refund":
                    decision = interrupt({"call_id": call_id, "arguments": args})
                    if decision.get("approved"):
                        out = worker.pay(state["sender"], call_id, args, decision["by"])
                    else:
                        out = json.dumps({"status": "rejected", "note": decision.get("note")})
                elif name == "send_customer_message":
                    out = worker.email(state["sender"], state["subject"], call_id, args)
                else:
                    out = worker.read_tool(name, state["sender"], args)
                outputs.append({"type": "function_call_output", "call_id": call_id,
                                "output": out})
            return {"history": outputs, "new": outputs, "calls": []}

        graph = model_and_tools_graph(model, tools)
        self.db_path = self.out / "checkpoints.sqlite"
        self.conn = sqlite3.connect(self.db_path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.graph = graph.compile(checkpointer=self.saver)
        self.durability = "sync" if self.durable else None  # None: the default ("async")

    def _invoke(self, value: Any, thread_id: str) -> dict[str, Any]:
        kw = {"durability": self.durability} if self.durability else {}
        return self.graph.invoke(value, {"configurable": {"thread_id": thread_id}}, **kw)

    def pause(self, order_id: str) -> str:
        items, who = self.first_input(order_id)
        thread_id = "lg_" + uuid.uuid4().hex[:12]
        out = self._invoke({"history": items, "new": items, **who}, thread_id)
        assert out.get("__interrupt__"), out.keys()
        return thread_id

    def prepare(self, thread_id: str) -> str:
        """The thread's state, read as an approver's page would (``get_state``)."""
        state = self.graph.get_state({"configurable": {"thread_id": thread_id}})
        assert state.interrupts, state
        return thread_id

    def go(self, thread_id: str) -> str:
        from langgraph.types import Command
        out = self._invoke(Command(resume={"approved": True, "by": APPROVER}), thread_id)
        assert not out.get("__interrupt__") and not out.get("calls"), out.keys()
        return "done"

    def run_scenario(self, order_id: str) -> dict[str, Any]:
        self.approve(self.pause(order_id))
        return {}

    def state_bytes(self, thread_id: str) -> int:
        c = self.conn.execute("SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0)"
                              " FROM checkpoints WHERE thread_id = ?", (thread_id,)).fetchone()
        w = self.conn.execute("SELECT coalesce(sum(length(value)), 0) FROM writes"
                              " WHERE thread_id = ?", (thread_id,)).fetchone()
        return c[0] + w[0]

    def seed(self, thread_id: str, n: int) -> None:
        for table in ("checkpoints", "writes"):
            cols = [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]
            rows = self.conn.execute(f"SELECT {','.join(cols)} FROM {table} WHERE thread_id = ?",
                                     (thread_id,)).fetchall()
            at = cols.index("thread_id")
            self.conn.executemany(
                f"INSERT INTO {table}({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                [(*r[:at], f"seed_{i:07d}", *r[at + 1:]) for i in range(n) for r in rows])
        self.conn.commit()

    def find_waiting(self) -> int:
        """Each thread's state through the graph (``get_state``); those with an interrupt.

        The checkpointer has no call that lists threads, so their ids come from its table.
        """
        threads = [r[0] for r in self.conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        return sum(bool(self.graph.get_state({"configurable": {"thread_id": t}}).interrupts)
                   for t in threads)


WORKERS = {"project": ProjectWorker, "sdk": SdkWorker, "langgraph": LangGraphWorker}


def make_worker(args: argparse.Namespace) -> Worker:
    return WORKERS[args.config.split("-")[0]](
        args.config, Path(args.out), Path(args.data), args.base_url, args.first_order,
        counter_file=Path(args.counter) if args.counter else None)


def worker_main(args: argparse.Namespace) -> int:
    """Serve commands, one JSON line each, from the bench process until "quit"."""
    worker = make_worker(args)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "quit":
                break
            if op == "scenario":
                reply: Any = worker.scenario()
            elif op == "pause":
                handle = worker.pause(worker.take_order())
                reply = {"handle": handle, "state_bytes": worker.state_bytes(handle)}
            elif op == "seed":
                t0 = time.perf_counter()
                worker.seed(cmd["handle"], cmd["n"])
                reply = {"seconds": time.perf_counter() - t0}
            elif op == "find":
                t0 = time.perf_counter()
                found = worker.find_waiting()
                reply = {"seconds": time.perf_counter() - t0, "found": found}
                if hasattr(worker, "first_page"):
                    reply["first_page_seconds"] = worker.first_page()
            else:
                raise ValueError(op)
        except Exception as exc:  # noqa: BLE001 - reported to the bench process
            import traceback
            reply = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        print(json.dumps(reply), flush=True)
    return 0


def approver_main(args: argparse.Namespace) -> int:
    """One of two approvers racing on the same paused run."""
    worker = make_worker(args)
    try:
        prepared = worker.prepare(args.approve)  # both approvers see the run waiting...
    except Exception as exc:  # noqa: BLE001 - the outcome is the measurement
        print(json.dumps({"outcome": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 0
    # ...and click Approve at the same moment: when both are ready (a barrier of two files).
    Path(f"{args.counter}.ready.{os.getpid()}").touch()
    ready = Path(args.counter).parent.glob(f"{Path(args.counter).name}.ready.*")
    while len(list(ready)) < 2 and time.time() < args.start_at:
        time.sleep(0.0005)
        ready = Path(args.counter).parent.glob(f"{Path(args.counter).name}.ready.*")
    try:
        outcome = worker.go(prepared)
    except Exception as exc:  # noqa: BLE001 - the outcome is the measurement
        outcome = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"outcome": outcome}), flush=True)
    return 0


# ==============================================================================================
# bench side
# ==============================================================================================

class Proc:
    def __init__(self, config: str, root: Path, data: Path, base_url: str, first_order: int,
                 env: dict[str, str]) -> None:
        self.config = config
        self.out = root / config
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--config", config,
                     "--out", str(self.out), "--data", str(data), "--base-url", base_url]
        self.env = env
        self.p = subprocess.Popen([*self.argv, "--worker", "--first-order", str(first_order)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.config} died")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"worker {self.config}: {reply['error']}\n{reply.get('trace')}")
        return reply

    def close(self) -> None:
        try:
            self.ask(op="quit")
        except (RuntimeError, BrokenPipeError, ValueError):
            pass
        self.p.wait(timeout=30)


def race(proc: Proc, first_order: int) -> dict[str, Any]:
    """Two approver processes approve the same paused run at the same moment."""
    handle = proc.ask(op="pause")["handle"]
    counter = proc.out / f"race-{handle}.txt"
    outbox = proc.out / "outbox.log"
    emails_before = len(outbox.read_text().splitlines()) if outbox.exists() else 0
    start_at = time.time() + 120.0  # a deadline only: they start together once both are ready
    ps = [subprocess.Popen([*proc.argv, "--approve", handle, "--start-at", str(start_at),
                            "--counter", str(counter), "--first-order", str(first_order + i)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=proc.env) for i in range(2)]
    outcomes = []
    for p in ps:
        stdout, stderr = p.communicate(timeout=120)
        lines = stdout.strip().splitlines()
        outcomes.append(json.loads(lines[-1])["outcome"] if lines else f"crashed: {stderr[-300:]}")
    runs = len(counter.read_text().splitlines()) if counter.exists() else 0
    emails = len(outbox.read_text().splitlines()) - emails_before
    return {"refund_tool_runs": runs, "emails": emails, "outcomes": outcomes}


def offline_env(shim: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REFUND_AGENT_") and k != "CRASH_AFTER_REFUND"}
    env.update({"PYTHONUNBUFFERED": "1", "OPENAI_AGENTS_DISABLE_TRACING": "1"})
    if shim is not None:
        env.update({"LD_PRELOAD": str(shim), "REFUND_BENCH_SHIM": str(shim)})
    return env


def median(xs: list[float]) -> float:
    import statistics
    return statistics.median(xs) if xs else float("nan")


def summarize(config: str, samples: list[dict[str, Any]], extra: dict[str, Any]) -> dict:
    cpu = [c for s in samples for c in s["model_cpu"]]
    return {
        "config": config, "scenarios": len(samples),
        "requests": median([s["requests"] for s in samples]),
        "wall_ms_p50": round(1000 * median([s["wall"] for s in samples]), 1),
        "client_cpu_per_request_ms": round(1000 * median(cpu), 2),
        "harness_cpu_per_turn_ms": round(1000 * median(
            [s["harness_cpu_per_turn"] for s in samples]), 2),
        "fsyncs_per_scenario": median([s["fsyncs"] for s in samples]),
        "last_request_bytes": median([s["last_request_bytes"] for s in samples]),
        **({"store_commits": median([s["store_commits"] for s in samples]),
            "durable_store_commits": median([s["durable_store_commits"] for s in samples])}
           if samples and "store_commits" in samples[0] else {}),
        **extra}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (about 1-2 minutes)")
    p.add_argument("--scenarios", type=int, help="measured scenarios per configuration")
    p.add_argument("--paused", type=int, help="paused runs seeded per configuration")
    p.add_argument("--configs", nargs="*", help=f"a subset of {' '.join(CONFIGS)}")
    p.add_argument("--json", type=Path, help="save the results here (e.g. bench/peers.json)")
    p.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    p.add_argument("--plot", type=Path, help="draw docs/peers.png into this folder")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    # worker modes (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--approve", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    p.add_argument("--first-order", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--counter", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.approve:
        return approver_main(args)

    missing = peers_missing()
    if missing:
        print(f"Missing: {', '.join(missing)}.\n\n{INSTALL_HINT}", file=sys.stderr)
        return 2
    from benchlib import machine, make_bench_shop

    from offline_model import start_offline_server

    configs = args.configs or CONFIGS
    scenarios = args.scenarios or (6 if args.quick else 40)
    warmup = 2
    paused = args.paused or (1_000 if args.quick else 10_000)
    per_config = scenarios + warmup + 8
    root = Path(tempfile.mkdtemp(prefix="refund-agent-peers-"))
    data = make_bench_shop(root / "data", per_config * len(configs) + 20)
    shim = build_shim(root)
    server = start_offline_server(root / "offline-model.sqlite3")
    env = offline_env(shim)
    log(f"peers bench in {root}; fsyncs counted "
        f"{'by an LD_PRELOAD shim' if shim else 'in Python only (no C compiler)'}")
    started = time.time()
    procs: dict[str, Proc] = {}
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick,
                               "load_avg_before": [round(x, 2) for x in os.getloadavg()],
                               "fsync_method": "LD_PRELOAD shim" if shim else "python-only",
                               "command": "python bench/peers.py" + (
                                   " --quick" if args.quick else "")}
    try:
        for i, config in enumerate(configs):
            procs[config] = Proc(config, root, data, server.base_url, 1 + i * per_config, env)
        samples: dict[str, list[dict]] = {c: [] for c in configs}
        for rnd in range(warmup + scenarios):
            k = rnd % len(configs)
            for config in configs[k:] + configs[:k]:
                s = procs[config].ask(op="scenario")
                if rnd >= warmup:
                    samples[config].append(s)
            if rnd % 5 == 4:
                log(f"  round {rnd + 1}/{warmup + scenarios}")
        extra: dict[str, dict[str, Any]] = {c: {} for c in configs}
        log(f"state at the pause; seeding {paused:,} paused runs per configuration")
        for config in configs:
            handle = procs[config].ask(op="pause")
            extra[config]["state_bytes_at_pause"] = handle["state_bytes"]
            if config in FAMILY:  # the defaults: one search per framework
                seeded = procs[config].ask(op="seed", handle=handle["handle"], n=paused)
                os.sync()
                found = procs[config].ask(op="find")
                extra[config]["find_waiting"] = {"paused_runs": paused, "found": found["found"],
                                                 "ms": round(1000 * found["seconds"], 1),
                                                 "seed_s": round(seeded["seconds"], 1)}
                if "first_page_seconds" in found:
                    extra[config]["find_waiting"]["first_page_ms"] = round(
                        1000 * found["first_page_seconds"], 1)
                log(f"  {config}: found {found['found']:,} in {found['seconds']:.3f} s")
        log("two approvers at once")
        for k, config in enumerate(c for c in configs if c in FAMILY):
            extra[config]["two_approvers"] = race(procs[config], 900_000 + 10 * k)
            log(f"  {config}: {extra[config]['two_approvers']}")
        results["configs"] = [summarize(c, samples[c], extra[c]) for c in configs]
    finally:
        for proc in procs.values():
            proc.close()
        server.close()
        results["seconds"] = round(time.time() - started, 1)
        results["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    results["targets"] = targets(results["configs"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(targets_text(results["targets"]))
    if args.markdown:
        args.markdown.write_text(table(results, markdown=True) + "\n")
    if args.plot:
        log(f"wrote {plot(results, args.plot)}")
    return 0


# -- reporting ---------------------------------------------------------------------------------

def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {r["config"]: r for r in rows}
    ours = by.get("project")
    peers = [r for r in rows if r["config"] != "project"]
    if not ours or not peers:
        return {}
    fastest = min(peers, key=lambda r: r["wall_ms_p50"])
    # Every peer configuration keeps at most as much as the project does at the moments that
    # matter (the *-fsync / *-sync ones as much, the defaults less), so all of them qualify
    # for "equal or weaker durability": the target is checked against the fastest of all.
    # Issue #37 words it "at equal durability", the *-fsync / *-sync ones: shown beside it.
    equal = [r for r in peers if r["config"].endswith(("-fsync", "-sync"))]
    fastest_equal = min(equal, key=lambda r: r["wall_ms_p50"]) if equal else None
    return {
        "fastest_peer": fastest["config"],
        "wall_vs_fastest_peer": round(ours["wall_ms_p50"] / fastest["wall_ms_p50"], 2),
        **({"fastest_equal_durability_peer": fastest_equal["config"],
            "wall_vs_fastest_equal_durability_peer": round(
                ours["wall_ms_p50"] / fastest_equal["wall_ms_p50"], 2)}
           if fastest_equal else {}),
        "wall_target": 0.7,   # issue #37 (0.9 before it)
        "fsyncs_per_scenario": ours.get("fsyncs_per_scenario"),
        "sync_commits_per_scenario": ours.get("durable_store_commits"),
        "sync_commits_target": 6,
        "harness_cpu_vs_leanest_peer": round(
            ours["harness_cpu_per_turn_ms"] / min(r["harness_cpu_per_turn_ms"] for r in peers), 2),
        "harness_target": 0.4,   # issue #37 (0.5 before it)
    }


def targets_text(t: dict[str, Any]) -> str:
    if not t:
        return ""
    ok = "met" if t["wall_vs_fastest_peer"] <= t["wall_target"] else "NOT met"
    ok2 = "met" if t["harness_cpu_vs_leanest_peer"] <= t["harness_target"] else "NOT met"
    ok3 = "met" if (t.get("sync_commits_per_scenario") or 99) <= t["sync_commits_target"] \
        else "NOT met"
    return (f"\nsynchronous (fsynced) store commits per scenario: "
            f"{t.get('sync_commits_per_scenario')} (target <= {t['sync_commits_target']}: {ok3})"
            f"\nwall per scenario / fastest peer ({t['fastest_peer']}): "
            f"{t['wall_vs_fastest_peer']:.2f}x (target <= {t['wall_target']}x: {ok})\n"
            + (f"wall per scenario / fastest peer at equal durability "
               f"({t['fastest_equal_durability_peer']}): "
               f"{t['wall_vs_fastest_equal_durability_peer']:.2f}x\n"
               if "fastest_equal_durability_peer" in t else "") +
            f"harness CPU per turn / leanest peer: {t['harness_cpu_vs_leanest_peer']:.2f}x "
            f"(target <= {t['harness_target']}x: {ok2})")


def _fmt_bytes(n: float | None) -> str:
    if n is None or n != n:
        return ""
    return f"{n / 1000:.1f} kB"


ROWS = [
    ("wall per scenario, p50", lambda r: f"{r['wall_ms_p50']:.0f} ms"),
    ("model requests per scenario", lambda r: f"{r['requests']:.0f}"),
    ("client CPU per request, inside the model call",
     lambda r: f"{r['client_cpu_per_request_ms']:.1f} ms"),
    ("harness CPU per turn, outside the model call",
     lambda r: f"{r['harness_cpu_per_turn_ms']:.1f} ms"),
    ("fsyncs per scenario", lambda r: f"{r['fsyncs_per_scenario']:.0f}"),
    ("... store commits, fsynced / all",
     lambda r: (f"{r['durable_store_commits']:.0f} / {r['store_commits']:.0f}"
                if "store_commits" in r else "")),
    ("bytes sent on the last request", lambda r: _fmt_bytes(r["last_request_bytes"])),
    ("state stored at the pause", lambda r: _fmt_bytes(r.get("state_bytes_at_pause"))),
    ("find waiting runs among N paused: all of them",
     lambda r: (f"{r['find_waiting']['ms']:,.1f} ms (N={r['find_waiting']['paused_runs']:,})"
                if r.get("find_waiting") else "")),
    ("... the queue's first page (200)",
     lambda r: (f"{r['find_waiting']['first_page_ms']:,.1f} ms"
                if r.get("find_waiting", {}).get("first_page_ms") is not None else "")),
    ("two approvers at once: refund tool runs / emails",
     lambda r: (f"{r['two_approvers']['refund_tool_runs']} / {r['two_approvers']['emails']}"
                if r.get("two_approvers") else "")),
]


def table(results: dict[str, Any], markdown: bool = False) -> str:
    rows = results["configs"]
    head = ["", *(r["config"] for r in rows)]
    body = [[name, *(fmt(r) for r in rows)] for name, fmt in ROWS]
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in body]
        return "\n".join(out)
    w = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(line))
                     for line in [head, *body])


def plot(results: dict[str, Any], folder: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["configs"]
    names = [r["config"] for r in rows]
    colors = ["#2a7" if n == "project" else ("#58c" if n.startswith("sdk") else "#c84")
              for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, key, title in ((axes[0], "wall_ms_p50", "wall per scenario, p50 (ms)"),
                           (axes[1], "harness_cpu_per_turn_ms", "harness CPU per turn (ms)"),
                           (axes[2], "fsyncs_per_scenario", "fsyncs per scenario")):
        ax.barh(names, [r[key] for r in rows], color=colors)
        ax.set_title(title, fontsize=10)
        ax.invert_yaxis()
        for y, r in enumerate(rows):
            ax.text(r[key], y, f" {r[key]:.3g}", va="center", fontsize=8)
    axes[1].set_yticklabels([])
    axes[2].set_yticklabels([])
    fig.suptitle("Maya's scenario on the offline model at zero latency, same server, "
                 "interleaved (bench/peers.py)", fontsize=10)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "peers.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
