"""The tool-call parsers (hermes, pythonic): calls in order, every malformed call a failure."""

import pytest

from rl.envs.parsers import PARSERS, RENDERERS, Parsed, ToolCall, hermes, render_hermes

CALC = '{"name": "calculator", "arguments": {"expression": "12*13"}}'


@pytest.mark.parametrize("text,calls,failures", [
    ("The answer is 156.", [], []),
    (f"Let me compute.\n<tool_call>\n{CALC}\n</tool_call>",
     [ToolCall("calculator", {"expression": "12*13"})], []),
    (f"<tool_call>{CALC}</tool_call> and <tool_call>{{\"name\": \"python\", \"arguments\": "
     "{\"code\": \"print(1)\"}}</tool_call>",
     [ToolCall("calculator", {"expression": "12*13"}), ToolCall("python", {"code": "print(1)"})],
     []),
    ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>',
     [ToolCall("f", {"x": 1})], []),  # arguments as a JSON string
    ('<tool_call>{"name": "f"}</tool_call>', [ToolCall("f", {})], []),
    ("<tool_call>{bad json}</tool_call>", [],
     ["the tool call is not valid JSON (Expecting property name enclosed in double quotes "
      "at character 1)"]),
    ("<tool_call>[1, 2]</tool_call>", [], ["the tool call is not a JSON object"]),
    ('<tool_call>{"arguments": {}}</tool_call>', [], ['the tool call has no "name" string']),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', [],
     ['the "arguments" of f are not a JSON object']),
    ('<tool_call>{"name": "f", "arguments": "x"}</tool_call>', [],
     ['the "arguments" of f are a string that is not JSON']),
    (f"<tool_call>{CALC}</tool_call><tool_call>{CALC[:20]}",
     [ToolCall("calculator", {"expression": "12*13"})],
     ["the tool call is not closed with </tool_call>"]),
])
def test_hermes(text, calls, failures):
    parsed = hermes(text)
    assert parsed == Parsed(tuple(calls), tuple(failures))
    assert parsed.attempted == bool(calls or failures)


def test_render_round_trips():
    call = ToolCall("python", {"code": "print('<é>')\nx = 1"})
    assert hermes(render_hermes(call)).calls == (call,)


def test_registry_names_the_parsers():
    assert PARSERS.get("hermes") is hermes
    with pytest.raises(KeyError, match="unknown tool-call parser 'xml' "):
        PARSERS.get("xml")


@pytest.mark.parametrize("text,calls,failures", [
    ("156", [], []),
    ("The answer is [156].", [], []),  # prose: only a turn that starts with [ calls
    ('[calculator(expression="12 * 13")]', [ToolCall("calculator", {"expression": "12 * 13"})],
     []),
    (' [f(x=1, y=[2, "a"], z=None), g()] ', [ToolCall("f", {"x": 1, "y": [2, "a"], "z": None}),
                                            ToolCall("g", {})], []),
    ('[calculator(expression="12 * 13")', [], ["the tool calls are not a Python list "
                                               "('[' was never closed)"]),
    ("[1, f(a=2)]", [ToolCall("f", {"a": 2})],
     ["an item of the tool-call list is not a call name(...)"]),
    ('[f("x")]', [], ["the call of f has positional arguments (write name=value)"]),
    ("[f(x=open('/etc/passwd'))]", [], ["the argument x of f is not a literal"]),
    ("[f(**{'x': 1})]", [], ["the call of f unpacks **arguments"]),
    ("[obj.f(x=1)]", [], ["an item of the tool-call list is not a call name(...)"]),
    ("[]", [], ["the list of tool calls is empty"]),
    ("[" * 5000 + "]" * 5000, [], None),  # too deep for the parser: one failure, no crash
])
def test_pythonic(text, calls, failures):
    parsed = PARSERS.get("pythonic")(text)
    assert list(parsed.calls) == calls
    if failures is None:
        assert len(parsed.failures) == 1
    else:
        assert list(parsed.failures) == failures


@pytest.mark.parametrize("call", [ToolCall("calculator", {"expression": "12 * 13"}),
                                  ToolCall("f", {"s": 'a "quoted"\nline', "n": 3, "b": True,
                                                 "l": [1.5, None]})])
def test_renderers_round_trip(call):
    for name, render in RENDERERS.items():
        assert PARSERS.get(name)(render(call)) == Parsed((call,)), name
