"""The calculator (exact, bounded) and the python tool (through the sandbox): one output
per call, bad arguments an error output."""

import pytest

from rl.envs.sandbox import Limits
from rl.envs.tools import TOOLS, Calculator, Output, check_arguments


@pytest.mark.parametrize("arguments,output", [
    ({"expression": "123 * 456"}, Output("56088")),
    ({"expression": "2**10 - 3/4"}, Output("4093/4")),
    ({"expression": "2^3^2"}, Output("512")),  # right-associative
    ({"expression": "(1.5 + 2.25) * 4"}, Output("15")),
    ({"expression": "1/0"}, Output("error: division by zero", True)),
    ({"expression": "9^99999"}, Output("error: exponent 99999 exceeds 1000", True)),
    ({"expression": "import os"}, Output("error: unexpected character 'i' at 0", True)),
    ({}, Output("error: calculator needs the argument 'expression'", True)),
    ({"expression": "1", "x": 2}, Output("error: calculator has no argument 'x' "
                                         "(arguments: expression)", True)),
    ({"expression": 7}, Output("error: the argument 'expression' of calculator must be a "
                              "string", True)),
])
def test_calculator(arguments, output):
    assert Calculator().call_many([arguments]) == [output]


def test_python_runs_each_call_in_the_sandbox(tmp_path):
    tool = TOOLS.get("python")(limits=Limits(wall_s=20.0, cpu_s=5), scratch_root=str(tmp_path))
    outputs = tool.call_many([{"code": "print(2 ** 100)"}, {"code": "1/0"}, {},
                              {"code": "print(open('/etc/passwd').read())"}])
    assert outputs[0] == Output("1267650600228229401496703205376\n")
    assert outputs[1] == Output("ZeroDivisionError: division by zero", True)
    assert outputs[2] == Output("error: python needs the argument 'code'", True)
    assert outputs[3].error and "Permission denied: '/etc/passwd'" in outputs[3].text


def test_schemas_are_function_declarations():
    for name in TOOLS:
        schema = TOOLS.get(name).schema
        assert schema["type"] == "function" and schema["function"]["name"] == name
        assert check_arguments(TOOLS.get(name), {}) is not None  # every tool needs something
