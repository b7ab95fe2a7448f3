"""Tools as declarations: what a tool is, its strict schema, and how a call is validated.

A tool says what it is (:class:`ToolKind`): read-only, an outside effect done at once under
an idempotency key, or an outside effect a person approves first (``needs_approval``). The
loop dispatches on that declaration and on the tool's own functions, never on its name, so
every agent declares its tools the same way (the refund desk's are in desk/tools.py, the
examples' in their own modules).

Schemas are generated from the pydantic models (strict: every field required, nothing extra,
no strings or booleans where a number belongs), so the JSON the model sees and the validation
the code does can never drift apart.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, Self

from pydantic import AfterValidator, BaseModel, ValidationError

from .models import Approval, Call, Proposal, Run, Step, StepKind
from .outside.ledger import IdempotentLog, StoreLog
from .store import Lease, Output, Store
from .telemetry import points
from .turns import StepData, Waiting


def at_most(limit: int, what: str) -> AfterValidator:
    """A validator refusing text longer than ``limit`` characters, naming ``what``."""
    def check(value: str) -> str:
        if len(value) > limit:
            raise ValueError(f"the {what} is {len(value):,} characters long; write at most "
                             f"{limit:,}")
        return value
    return AfterValidator(check)


class ToolKind(StrEnum):
    """What running a tool does to the world, which decides how the loop runs it."""

    READ_ONLY = "read_only"            # changes nothing: run again freely after a crash
    EFFECT = "effect"                  # an outside effect, done once per idempotency key
    NEEDS_APPROVAL = "needs_approval"  # an outside effect a person approves first; the run
                                       # pauses durably until then


@dataclass(frozen=True)
class Tool:
    """A function tool: what the model is told, and what the loop does with a call.

    Args:
        name: the function's name, as the model calls it.
        description: what the model is told the tool does.
        args: the pydantic model of its arguments (the JSON schema is generated from it).
        kind: read-only, an effect, or an effect that needs approval.
        run: what a call does. ``run(context, args)`` for read-only tools and effects;
            for ``needs_approval``, ``run(context, args, approval)`` once a person approved
            it: the loop calls it with an approved approval of this very call only, and
            checks the run's lease first (as before any effect). ``context`` is what the
            agent hands its tools for one call (:class:`CallContext`); effects take their
            idempotency key from it (the call's key: the run and the call id).
        propose: ``needs_approval`` only: ``propose(context, args)`` queues the proposal
            for a person and returns ``Waiting``, or returns the call's output at once
            when there is nothing to propose (an error for the model).
        declined: ``needs_approval`` only: ``declined(args, approval) -> dict``, the output
            the model gets when a person rejected the proposal, asked the customer first,
            or let it expire. Pure (no context: it cannot act). None: :func:`not_done`.
        done_status: ``needs_approval`` only: the ``status`` its output has when the
            approved effect was carried out. An effect written in the same response after
            a proposal that was not carried out is held back (it may promise what did not
            happen).
    """

    name: str
    description: str
    args: type[BaseModel]
    kind: ToolKind = ToolKind.READ_ONLY
    run: Callable[..., Any] | None = None
    propose: Callable[..., Any] | None = None
    done_status: str = ""
    declined: Callable[[Any, Approval], dict[str, Any]] | None = None

    @property
    def needs_approval(self) -> bool:
        return self.kind is ToolKind.NEEDS_APPROVAL

    @property
    def has_effect(self) -> bool:
        return self.kind is not ToolKind.READ_ONLY

    def not_carried_out(self, args: BaseModel, approval: Approval) -> dict[str, Any]:
        """The output of a proposal a person did not approve (see ``declined``)."""
        return (self.declined or not_done)(args, approval)

    def schema(self) -> dict[str, Any]:
        """The tool in the Responses API's function-tool format (strict)."""
        schema = self.args.model_json_schema()
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": _strict(schema, schema.get("$defs", {})), "strict": True}


def not_done(args: BaseModel, approval: Approval) -> dict[str, Any]:
    """The default output of a proposal that was not approved: the decision and its note."""
    return {"status": str(approval.status), "decided_by": approval.decided_by,
            "note": approval.note or ""}


def toolset(*tools: Tool) -> dict[str, Tool]:
    """Tools by name, refusing a tool declared without what its kind needs."""
    for tool in tools:
        if tool.run is None or (tool.needs_approval and tool.propose is None):
            raise TypeError(f"tool {tool.name} ({tool.kind}) lacks its run/propose function")
    return {tool.name: tool for tool in tools}


def parse_call(tools: Mapping[str, Tool], name: str, arguments: str) -> BaseModel | str:
    """Validate a call's arguments against ``tools``; a string is an error for the model."""
    tool = tools.get(name)
    if tool is None:
        return f"There is no tool called {name!r}. Use one of: {', '.join(tools)}."
    try:
        return tool.args.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                             for e in exc.errors())
        return f"Invalid arguments for {name}: {problems}."


def _strict(schema: Any, defs: Mapping[str, Any]) -> Any:
    """Make a pydantic JSON schema strict-mode friendly, recursively.

    References are inlined, titles dropped, and every object gets all its properties required
    and no others allowed, which is what strict function calling demands.
    """
    if isinstance(schema, list):
        return [_strict(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _strict(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    out = {k: _strict(v, defs) for k, v in schema.items()
           if k not in ("title", "$defs", "default")}
    if "properties" in schema:
        out["properties"] = {name: _strict(prop, defs)
                             for name, prop in schema["properties"].items()}
        out["required"] = list(schema["properties"])
        out["additionalProperties"] = False
    return out


@functools.cache
def _schemas_json(tools: tuple[Tool, ...]) -> str:
    return json.dumps([tool.schema() for tool in tools])


def schemas(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """The tools in the Responses API's function-tool format (a fresh copy each call).

    Generating the schemas takes pydantic a few hundred microseconds and every turn sends them,
    so they are generated once per set of tools and copied from their JSON text.
    """
    return json.loads(_schemas_json(tuple(tools.values())))


def as_output(value: dict[str, Any]) -> str:
    return json.dumps(value, default=str)


@dataclass(frozen=True)
class Outcome:
    """A call's result: its output for the model, the steps it adds, an audit line."""

    output: dict[str, Any]
    steps: list[StepData]
    audit: dict[str, Any] | None = None

    def saved(self, call: Call) -> Output:
        """As the store saves it for ``call``: the text the model is sent, the result step
        first, then the call's own steps."""
        return Output(as_output(self.output),
                      [(StepKind.RESULT, {"call_id": call.call_id, "name": call.name,
                                   "output": self.output}), *self.steps], self.audit)

    @property
    def changes_the_store(self) -> bool:
        """Whether saving it writes more than its result (an escalation, an audit line), so
        a call after it must see it saved before running."""
        return bool(self.steps or self.audit)


class EffectLog(Protocol):
    """The idempotent log a tool writes through (outside/ledger.py): ``make`` once per key."""

    def once(self, key: str, request: dict[str, Any], make: Callable[[], dict[str, Any]]
             ) -> tuple[dict[str, Any], bool]: ...

    def records(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class CallContext:
    """What a tool function gets for one call, and nothing more: its run, its call (and the
    call's ``key``), ``fence()``, the idempotent ``once``, ``propose``, a named ``crash``
    point, and read access to its run's own records (:meth:`steps`, :meth:`approvals`).

    The store stays private (``_store``): a tool cannot reach other runs, other agents'
    records or the store's writes. An agent that hands its tools more (the refund desk's
    shop, payments and records) subclasses it with keyword-only fields, built with
    :meth:`extend` from the loop's own (Loop.context).
    """

    run: Run
    call: Call
    _lease: Lease = field(repr=False)
    _store: Store = field(repr=False)
    _crash: Callable[[str], None] = field(repr=False)
    _effects: EffectLog | None = field(default=None, repr=False)

    @classmethod
    def extend(cls, base: CallContext, **more: Any) -> Self:
        """``base`` (the loop's context for the call) with an agent's own fields added."""
        return cls(**{f.name: getattr(base, f.name) for f in fields(CallContext)}, **more)

    @property
    def key(self) -> str:
        """The call's idempotency key: its run and call id (models.call_key); also the id of
        the approval a ``needs_approval`` call proposes."""
        return self.call.key or self.call.call_id

    def fence(self) -> None:
        """LeaseLost if another process took the run over: then nothing may happen. The loop
        checks it before every effect function; a tool checks again before a later effect."""
        self._store.check_lease(self._lease)

    def crash(self, name: str) -> None:
        """A named crash point (crash.py, declared in Loop.crash_points), for the tests."""
        self._crash(name)

    def once(self, request: dict[str, Any], make: Callable[[], dict[str, Any]]
             ) -> tuple[dict[str, Any], bool]:
        """The sixth boundary: ``make`` done once for this call (keyed by :attr:`key`) in
        the agent's effect log (Loop.effect_log); returns (record, reused). A repeat after a
        crash gets the first record back; the same key with another ``request`` is refused
        (IdempotencyConflict)."""
        if self._effects is None:
            raise TypeError("this agent keeps no effect log (Loop.effect_log)")
        return self._effects.once(self.key, request, make)

    def steps(self) -> list[Step]:
        """The run's timeline so far, oldest first."""
        return self._store.steps(self.run.id)

    def approvals(self) -> list[Approval]:
        """The run's proposals, oldest first."""
        return self._store.run_approvals(self.run.id)

    def propose(self, title: str, *, subject: str = "", amount_cents: int = 0
                ) -> Waiting | Outcome:
        """Queue this call for a person (boundary 4) and pause the run: a ``needs_approval``
        tool's ``propose`` returns this.

        ``title`` is the sentence the reviewer reads; ``subject`` what the action is on;
        ``amount_cents`` what it moves, when it moves money (0: nothing to pay). The store
        writes the approval, its audit line and the run's pause in one transaction, keyed
        by the call, so proposing again after a crash finds the same approval.
        """
        queued = self._store.queue_approval(
            self._lease, response_id=self.call.response_id, call_id=self.call.call_id,
            subject=subject, title=title, customer=self.run.sender,
            price=lambda _held: Proposal(subject=subject, amount_cents=amount_cents),
            release=True)
        if isinstance(queued, Approval):
            return Waiting(queued.id, released=True)
        return Outcome({"error": queued}, [])


def open_effect_log(store: Store, name: str, folder: str | Path) -> EffectLog:
    """Where an agent's ``ctx.once`` records (Loop.effect_log): the store's ledger where
    several hosts share the store, else ``<name>.log`` (JSONL) in the output folder."""
    return StoreLog(store, name) if store.shared else IdempotentLog(Path(folder) / f"{name}.log")


def done_at_once(tools: Mapping[str, Tool], calls: Iterable[tuple[str, str, str]]) -> bool:
    """Whether any of a response's calls (call id, name, arguments) is an outside effect done
    as soon as it runs (ToolKind.EFFECT): that response's commit is synced first, since its
    call ids are the effects' idempotency keys (store/responses.py, record_response)."""
    return any((tool := tools.get(name)) is not None and tool.kind is ToolKind.EFFECT
               for _, name, _ in calls)


def run_ahead(tools: Mapping[str, Tool], calls: Iterable[Call],
              context: Callable[[Call], CallContext]) -> dict[str, Output]:
    """The outputs of the read-only calls a response starts with, run before it is committed
    and saved with it (one transaction, not one each): nothing could come between, and a crash
    that loses them only runs them again (ToolKind.READ_ONLY). Stops at the first call that is
    not read-only (or repeats a call id), and after one whose outcome writes more than its
    result (an escalation), so the calls after it see that saved."""
    outputs: dict[str, Output] = {}
    for call in calls:
        tool = tools.get(call.name)
        if tool is None or tool.kind is not ToolKind.READ_ONLY or call.call_id in outputs:
            break
        args = parse_call(tools, call.name, call.arguments)
        with points.tool_span(call, tool):
            outcome = (Outcome({"error": args}, []) if isinstance(args, str)
                       else tool.run(context(call), args))  # type: ignore[misc]
        outputs[call.call_id] = outcome.saved(call)
        if outcome.changes_the_store:
            break
    return outputs
