"""Tool-call parsers: the text of a policy's turn -> the tool calls it makes.

    parsed = PARSERS.get("hermes")(text)    # Parsed(calls=[ToolCall(...)], failures=[...])

`hermes` reads the format Qwen2/2.5/3 and Hermes chat templates declare for tools: each
call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per turn
allowed. A call whose body is not a JSON object with a string `name` and an object
`arguments` (or a JSON string holding one, as some models write) is a *parse failure*:
it is counted and reported to the policy, never dropped silently. Text outside the tags
is the turn's prose (its final answer, when it makes no call).

`pythonic` reads the format of Llama 3.2 / Llama 4 templates (vLLM's `pythonic` tool
parser): a turn that is one Python list of calls with keyword arguments,
`[calculator(expression="12 * 13"), ...]`. A turn that starts with `[` is a call turn;
one that is not such a list (bad syntax, a positional argument, a value that is not a
literal) is one parse failure. It is half the tokens of `hermes` for the same call.

`RENDERERS[name](call)` writes a call in parser `name`'s format (warm-start traces).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

from rl.registry import Registry


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Parsed:
    """`calls` in the order written; `failures`: one line per malformed call."""
    calls: tuple[ToolCall, ...] = ()
    failures: tuple[str, ...] = ()

    @property
    def attempted(self) -> bool:
        """The turn tried to call a tool (well-formed or not)."""
        return bool(self.calls or self.failures)


Parser = Callable[[str], Parsed]
PARSERS: Registry[Parser] = Registry("tool-call parser")

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(_OPEN) + r"(.*?)(?:" + re.escape(_CLOSE) + r"|$)", re.DOTALL)


def _call_of(body: str) -> ToolCall | str:
    """A ToolCall, or the one-line reason the body is not one."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return f"the tool call is not valid JSON ({e.msg} at character {e.pos})"
    if not isinstance(data, dict):
        return "the tool call is not a JSON object"
    name, arguments = data.get("name"), data.get("arguments", {})
    if not isinstance(name, str) or not name:
        return 'the tool call has no "name" string'
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f'the "arguments" of {name} are a string that is not JSON'
    if not isinstance(arguments, dict):
        return f'the "arguments" of {name} are not a JSON object'
    return ToolCall(name, arguments)


@PARSERS.register("hermes")
def hermes(text: str) -> Parsed:
    """Every `<tool_call>...</tool_call>` block of `text`; an unclosed last block is a
    failure (the turn ended inside a call, at its token limit say)."""
    calls, failures = [], []
    for match in _BLOCK.finditer(text):
        if not match.group(0).endswith(_CLOSE):
            failures.append("the tool call is not closed with </tool_call>")
            continue
        call = _call_of(match.group(1).strip())
        (calls if isinstance(call, ToolCall) else failures).append(call)
    return Parsed(tuple(calls), tuple(failures))


def render_hermes(call: ToolCall) -> str:
    """The text a policy writes for `call` in the hermes format (for warm-start traces)."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{_OPEN}\n{body}\n{_CLOSE}"


@PARSERS.register("pythonic")
def pythonic(text: str) -> Parsed:
    """The calls of a turn that is a Python list of calls (see the module docstring)."""
    text = text.strip()
    if not text.startswith("["):
        return Parsed()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        return Parsed(failures=(f"the tool calls are not a Python list ({e.msg})",))
    except (ValueError, RecursionError, MemoryError):
        return Parsed(failures=("the tool calls are not a Python list",))
    if not isinstance(tree, ast.List):
        return Parsed(failures=("the tool calls are not a Python list",))
    calls, failures = [], []
    for item in tree.elts:
        call = _pythonic_call(item)
        (calls if isinstance(call, ToolCall) else failures).append(call)
    if not calls and not failures:
        failures.append("the list of tool calls is empty")
    return Parsed(tuple(calls), tuple(failures))


def _pythonic_call(node: ast.expr) -> ToolCall | str:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return "an item of the tool-call list is not a call name(...)"
    name = node.func.id
    if node.args:
        return f"the call of {name} has positional arguments (write name=value)"
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return f"the call of {name} unpacks **arguments"
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return f"the argument {keyword.arg} of {name} is not a literal"
    return ToolCall(name, arguments)


def render_pythonic(call: ToolCall) -> str:
    """The text a policy writes for `call` in the pythonic format."""
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False) if isinstance(v, str) else repr(v)}"
                     for k, v in call.arguments.items())
    return f"[{call.name}({args})]"


RENDERERS: dict[str, Callable[[ToolCall], str]] = {"hermes": render_hermes,
                                                   "pythonic": render_pythonic}
