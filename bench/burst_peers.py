"""The burst through a peer's async runner, each ticket to its pause (bench/burst.py's peers).

Run by bench/burst.py with a Python that has the peers (pip install -e ".[peers]"):

    python bench/burst_peers.py --config sdk --concurrency 64 --tickets 1000 \\
        --base-url http://127.0.0.1:PORT/v1 --data DATA --out OUT

- ``sdk``: the Agents SDK, ``await Runner.run(...)`` (async already) with an ``AsyncOpenAI``
  client; at the pause, ``result.to_state()`` written to a JSON file per run, as its
  human-in-the-loop guide does (bench/peers.py's SdkWorker, reused as it is).
- ``langgraph``: bench/peers.py's graph (a model node, a tool node that calls ``interrupt()``
  before paying) with an async model node (``AsyncOpenAI``), an ``AsyncSqliteSaver``
  checkpointer and ``graph.ainvoke``.

``asyncio.Semaphore(C)`` bounds the runs in flight, as ``refund-agent work --concurrency C``
does. Prints one JSON line: drain seconds (first run started to last pause stored), the
process's CPU over the drain, its peak RSS, how many runs paused, and the model requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers import MODEL, GraphState, SdkWorker, Worker, model_and_tools_graph  # noqa: E402

PEER_RETRIES = 5   # the project's REFUND_AGENT_MAX_RETRIES default, so like is met with like


class AsyncLangGraphWorker(Worker):
    """bench/peers.py's LangGraph graph, its model node async, checkpoints in AsyncSqliteSaver."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        import httpx2
        import openai
        from langgraph.types import interrupt

        from refund_agent.desk.tools import tool_schemas

        client = openai.AsyncOpenAI(base_url=self.base_url, api_key="bench",
                                    max_retries=self.retries, timeout=60.0,
                                    http_client=httpx2.AsyncClient(**self.http_options))
        worker = self

        async def model(state: GraphState) -> dict[str, Any]:
            params: dict[str, Any] = {"model": MODEL, "tools": tool_schemas(),
                                      "parallel_tool_calls": False,
                                      "reasoning": {"effort": "low"}, "input": state["history"]}
            response = await client.responses.create(**params)
            worker.model_cpu.append(0.0)   # counts the request
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
                    out = json.dumps({"status": "decided", "approved": decision.get("approved")})
                else:
                    out = worker.read_tool(name, state["sender"], args)
                outputs.append({"type": "function_call_output", "call_id": call_id,
                                "output": out})
            return {"history": outputs, "new": outputs, "calls": []}

        self.builder = model_and_tools_graph(model, tools)
        self.graph: Any = None

    async def pause(self, order_id: str) -> str:
        items, who = self.first_input(order_id)
        thread_id = "lg_" + uuid.uuid4().hex[:12]
        out = await self.graph.ainvoke({"history": items, "new": items, **who},
                                       {"configurable": {"thread_id": thread_id}})
        assert out.get("__interrupt__"), out.keys()
        return thread_id


async def burst(config: str, worker: Any, tickets: int, concurrency: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    orders = [worker.take_order() for _ in range(tickets)]

    async def one(order_id: str) -> bool:
        async with gate:
            if config == "sdk":
                await worker._pause(order_id)
            else:
                await worker.pause(order_id)
            return True

    async def run() -> list[Any]:
        return await asyncio.gather(*(one(o) for o in orders), return_exceptions=True)

    if config == "langgraph":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        async with AsyncSqliteSaver.from_conn_string(str(worker.out / "checkpoints.sqlite")) \
                as saver:
            worker.graph = worker.builder.compile(checkpointer=saver)
            await saver.setup()
            c0, t0 = time.process_time(), time.monotonic()
            done = await run()
            took, cpu = time.monotonic() - t0, time.process_time() - c0
    else:
        c0, t0 = time.process_time(), time.monotonic()
        done = await run()
        took, cpu = time.monotonic() - t0, time.process_time() - c0
    errors = [repr(d) for d in done if isinstance(d, BaseException)]
    return {"config": config, "tickets": tickets, "paused": sum(d is True for d in done),
            "errors": errors[:3], "error_count": len(errors), "drain_s": round(took, 2),
            "cpu_s": round(cpu, 2), "requests": len(worker.model_cpu),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["sdk", "langgraph"], required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--tickets", type=int, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import httpx2
    make = SdkWorker if args.config == "sdk" else AsyncLangGraphWorker
    # As refund-agent's worker: a connection kept open per run in flight (httpx keeps 20 by
    # default and opens the rest anew each request, a storm of connects at 64), and retries
    # for a request that fails before its answer starts (the project's default is 5).
    make.retries = PEER_RETRIES
    make.http_options = {"limits": httpx2.Limits(max_connections=args.concurrency,
                                                 max_keepalive_connections=args.concurrency)}
    worker = make(args.config, args.out, args.data, args.base_url, 1)
    result = asyncio.run(burst(args.config, worker, args.tickets, args.concurrency))
    print(json.dumps(result))
    return 0 if result["paused"] == args.tickets else 1


if __name__ == "__main__":
    sys.exit(main())
