"""Environments: a policy's turn in, observation tokens (or the episode's end) out.

    env = ToolEnvironment([Calculator()], parser="hermes", fmt=fmt, tokenizer=tokenizer)
    replies = env.respond([Turn(tokens, text, stopped=True), ...])   # one per row
    replies[0].observation    # token ids to append after the turn's stop token; () = done

An environment sees each row's last turn, the tokens it generated and their text, and
answers with the tokens of an observation, which the sampler appends to the row (with
loss mask 0), or with none: the episode is over and the task's verifier scores it.
Nothing re-renders the conversation: an observation is the format's fixed text around
the tool outputs (`rl.envs.observations`), tokenised once.

`ToolEnvironment` parses the turn's tool calls (`rl.envs.parsers`), runs them (the calls
of every row to one tool go as one batch, `Tool.call_many`), and answers with their
outputs in the order written, then one error line per malformed call. A turn with no
tool call ends the episode (its text is the answer), as does a turn cut by its token
limit (it did not stop). Every reply counts its tool calls, parse failures and tool
errors for the metrics.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Protocol

from rl.envs.observations import ObservationFormat
from rl.envs.parsers import PARSERS
from rl.envs.tools import Output, Tool

TRUNCATED = " ... [truncated]"


@dataclasses.dataclass(frozen=True)
class Turn:
    """One row's last turn: `tokens` [n] (ending with its stop token when `stopped`)."""
    tokens: tuple[int, ...]
    text: str
    stopped: bool


@dataclasses.dataclass(frozen=True)
class Reply:
    observation: tuple[int, ...] = ()
    text: str = ""
    tool_calls: int = 0
    parse_failures: int = 0
    tool_errors: int = 0

    @property
    def done(self) -> bool:
        return not self.observation


class Environment(Protocol):
    def respond(self, turns: Sequence[Turn]) -> list[Reply]: ...


class ToolEnvironment:
    """Tools behind a parser. `max_calls`: calls run per turn (more are answered with an
    error); `max_output_chars`: each output is cut there (`TRUNCATED` marks it). Any of
    the tokenizer's added-token strings in an output is broken with a zero-width space
    so that it stays text: a tool cannot end the policy's turn or open a new one."""

    def __init__(self, tools: Sequence[Tool], *, parser: str, fmt: ObservationFormat,
                 tokenizer, max_calls: int = 4, max_output_chars: int = 2000):
        if max_calls < 1 or max_output_chars < 1:
            raise ValueError(f"max_calls and max_output_chars must be >= 1, got {max_calls} "
                             f"and {max_output_chars}")
        self.tools = {tool.name: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("two tools share a name")
        self.parse, self.parser_name = PARSERS.get(parser), parser
        self.fmt, self.tokenizer = fmt, tokenizer
        self.max_calls, self.max_output_chars = max_calls, max_output_chars
        self._specials = tuple(sorted(tokenizer.special_tokens, key=len, reverse=True))

    def respond(self, turns: Sequence[Turn]) -> list[Reply]:
        parsed = [self.parse(t.text) if t.stopped else None for t in turns]
        outputs: list[list[Output]] = [[] for _ in turns]
        batches = collections.defaultdict(list)  # tool -> [(row, slot, arguments)]
        for row, p in enumerate(parsed):
            if p is None:
                continue
            for k, call in enumerate(p.calls):
                outputs[row].append(Output("", True))  # a slot, filled below
                if k >= self.max_calls:
                    outputs[row][k] = Output(f"error: at most {self.max_calls} tool calls a "
                                             "turn", error=True)
                elif call.name not in self.tools:
                    outputs[row][k] = Output(f"error: unknown tool {call.name!r} (tools: "
                                             f"{', '.join(sorted(self.tools))})", error=True)
                else:
                    batches[call.name].append((row, k, call.arguments))
            outputs[row] += [Output(f"error: {f}", error=True) for f in p.failures]
        for name, items in batches.items():
            results = self.tools[name].call_many([a for _, _, a in items])
            for (row, k, _), result in zip(items, results, strict=True):
                outputs[row][k] = result
        return [self._reply(p, out) for p, out in zip(parsed, outputs, strict=True)]

    def _reply(self, parsed, outputs: list[Output]) -> Reply:
        if parsed is None or not parsed.attempted:
            return Reply()
        text = self.fmt.render([self._clean(o.text) for o in outputs])
        ids = tuple(self.tokenizer.encode(text, add_special_tokens=False))
        return Reply(ids, text, len(parsed.calls), len(parsed.failures),
                     sum(o.error for o in outputs) - len(parsed.failures))

    def _clean(self, text: str) -> str:
        if len(text) > self.max_output_chars:
            text = text[:self.max_output_chars] + TRUNCATED
        for special in self._specials:
            text = text.replace(special, special[:1] + "\u200b" + special[1:])
        return text


@dataclasses.dataclass
class Record:
    """What one episode did: its tool calls, parse failures and tool errors; `consumed`:
    the tokens of its completion so far (turns and replies); `failure`: for its first
    turn with a failed call (a tool error or a call that does not parse), (the
    completion's length at that turn's end, the reply's tokens): Fission-GRPO's cut."""
    tool_calls: int = 0
    parse_failures: int = 0
    tool_errors: int = 0
    consumed: int = 0
    failure: tuple[int, tuple[int, ...]] | None = None


class Episodes:
    """An `Environment` as the sampler's `respond` (`sampling.turns`): decodes each
    stopped turn's tokens to text with `tokenizer` (special tokens dropped: the stop
    token is not the policy's text), answers with the reply's tokens or None (done), and
    keeps a `Record` per sample (`records[row]`)."""

    COUNTS = ("tool_calls", "parse_failures", "tool_errors")

    def __init__(self, env: Environment, tokenizer, samples: int):
        self.env, self.tokenizer = env, tokenizer
        self.records = [Record() for _ in range(samples)]

    @property
    def counts(self) -> dict[str, list[int]]:
        return {name: [getattr(r, name) for r in self.records] for name in self.COUNTS}

    def __call__(self, ends) -> list[tuple[int, ...] | None]:
        turns = [Turn(tuple(e.tokens), self.tokenizer.decode(list(e.tokens)), True)
                 for e in ends]
        replies = self.env.respond(turns)
        for end, reply in zip(ends, replies, strict=True):
            record = self.records[end.row]
            for name in self.COUNTS:
                setattr(record, name, getattr(record, name) + getattr(reply, name))
            record.consumed += len(end.tokens)
            if record.failure is None and (reply.parse_failures or reply.tool_errors):
                record.failure = (record.consumed, tuple(reply.observation))
            record.consumed += len(reply.observation)
        return [None if reply.done else reply.observation for reply in replies]
