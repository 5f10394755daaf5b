"""Tools a policy calls: a registry of factories keyed by config strings.

    tool = TOOLS.get("calculator")()          # or TOOLS.get("python")(limits=Limits(...))
    tool.schema                               # the JSON schema a chat template declares
    tool.call_many([{"expression": "12*13"}])  # [Output(text="156", error=False)]

A tool takes a batch of argument objects (one per calling row) and returns one `Output`
per call, in order: the text the policy will read and whether it is an error. Bad
arguments are an error output, not an exception; an exception from a tool is a bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Protocol

from rl.envs.sandbox import Limits, Sandbox
from rl.registry import Registry
from rl.rewards import expression


@dataclasses.dataclass(frozen=True)
class Output:
    text: str
    error: bool = False


class Tool(Protocol):
    name: str
    schema: dict[str, Any]  # {"type": "function", "function": {name, description, parameters}}

    def call_many(self, arguments: Sequence[dict[str, Any]]) -> list[Output]: ...


TOOLS: Registry[Callable[..., Tool]] = Registry("tool")


def function_schema(name: str, description: str, properties: dict[str, dict],
                    required: Sequence[str]) -> dict[str, Any]:
    """The OpenAI-style function declaration chat templates render for `tools=`."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required)}}}


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """The one-line reason `arguments` do not fit the tool's schema, or None."""
    parameters = tool.schema["function"]["parameters"]
    missing = [k for k in parameters["required"] if k not in arguments]
    if missing:
        return f"error: {tool.name} needs the argument {missing[0]!r}"
    extra = [k for k in arguments if k not in parameters["properties"]]
    if extra:
        return (f"error: {tool.name} has no argument {extra[0]!r} "
                f"(arguments: {', '.join(parameters['properties'])})")
    for key, spec in parameters["properties"].items():
        if key in arguments and spec.get("type") == "string" and not isinstance(
                arguments[key], str):
            return f"error: the argument {key!r} of {tool.name} must be a string"
    return None


def format_number(value: Fraction) -> str:
    """An integer as digits; a fraction as a/b (exact: the policy copies it)."""
    return str(value.numerator) if value.denominator == 1 else (
        f"{value.numerator}/{value.denominator}")


@TOOLS.register("calculator")
class Calculator:
    """Exact arithmetic on one expression: + - * / ^ (or **), parentheses, integers and
    decimals (`rl.rewards.expression`, bounded: no input can hang it)."""
    name = "calculator"
    schema = function_schema(
        "calculator", "Evaluate an arithmetic expression exactly.",
        {"expression": {"type": "string", "description": "e.g. 123 * 456"}}, ["expression"])

    def call_many(self, arguments: Sequence[dict[str, Any]]) -> list[Output]:
        return [self._call(a) for a in arguments]

    def _call(self, arguments: dict[str, Any]) -> Output:
        bad = check_arguments(self, arguments)
        if bad:
            return Output(bad, error=True)
        text = arguments["expression"].replace("**", "^")
        try:
            return Output(format_number(expression.evaluate(
                expression.parse(text, allow_power=True))))
        except expression.DivisionByZero:
            return Output("error: division by zero", error=True)
        except expression.ExpressionError as e:
            return Output(f"error: {e}", error=True)


@TOOLS.register("python")
class Python:
    """Runs Python code in the sandbox (`rl.envs.sandbox`); the output is what it prints,
    then its error line. The calls of a batch run in parallel."""
    name = "python"
    schema = function_schema(
        "python", "Run Python code and return what it prints.",
        {"code": {"type": "string", "description": "a Python program"}}, ["code"])

    def __init__(self, limits: Limits = Limits(), scratch_root: str | None = None,
                 parallel: int | None = None):
        self.sandbox = Sandbox(limits, scratch_root)
        self.parallel = parallel

    def call_many(self, arguments: Sequence[dict[str, Any]]) -> list[Output]:
        outputs: list[Output | None] = [None] * len(arguments)
        runs = []
        for i, a in enumerate(arguments):
            bad = check_arguments(self, a)
            if bad:
                outputs[i] = Output(bad, error=True)
            else:
                runs.append(i)
        results = self.sandbox.run_many([arguments[i]["code"] for i in runs], self.parallel)
        for i, result in zip(runs, results, strict=True):
            outputs[i] = Output(result.observation(), error=result.status != "ok")
        return outputs
