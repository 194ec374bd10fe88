"""Fuzzing the three parsers (.sq, .fleq, calc expressions): any text either assembles or
is refused with an InputError that names a place in it; no other exception escapes."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembler.diagnostics import SourceError
from assembler.subleq import assemble
from vm.apps.calc import compile_expression
from vm.common.errors import InputError
from vm.isa import FLEQ

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
LOCATION = re.compile(r"^<fuzz>:\d+:\d+: error: ", re.M)

SQ_TOKENS = [".data", ".code", ".bits", ".const", ".array", ".zero", "subleq", "goto", "halt",
             "x", "y", "loop", "EOF", "k", ":", ",", "=", "+", "-", "(", ")", "0", "1", "-1",
             "7", "255", "65536", "0x7f", "0b101", "99999999999999999999", " ", "\n", "\n",
             ";c", "\t", "$"]
FLEQ_TOKENS = [".data", ".code", ".d", ".param", ".zeros", ".matrix", "halt", "a", "b", "n",
               "add", "mul", "inv", "sqrt", "matmul", "nosuch", "if", "goto", "<=", "=", "(",
               ")", ",", ":", "[", "]", "1.0", "0", "-2.5", "1e300", "3", "2x2", "17x1", " ",
               "\n", "\n", "$"]
CALC_TOKENS = ["1", "2.5", "1e308", "1e400", "0", ".5", "x", "sqrt", "(", ")", "+", "-", "*",
               "/", "%", " ", "$", "sqrt("]


def token_text(tokens: list[str]):
    return st.lists(st.sampled_from(tokens), max_size=60).map("".join)


def check_refusal(error: InputError) -> None:
    if isinstance(error, SourceError):
        assert LOCATION.search(str(error)), str(error)
        assert "^" in str(error)


@FUZZ
@given(st.one_of(token_text(SQ_TOKENS), st.text(max_size=80)))
def test_sq_text_assembles_or_is_refused_with_a_location(text):
    try:
        program = assemble(text, "<fuzz>")
    except InputError as error:
        check_refusal(error)
    else:
        program.validate()


@FUZZ
@given(st.one_of(token_text(FLEQ_TOKENS), st.text(max_size=80)))
def test_fleq_text_assembles_or_is_refused_with_a_location(text):
    try:
        FLEQ.assemble_text(text, "<fuzz>")
    except InputError as error:
        check_refusal(error)


@FUZZ
@given(st.one_of(token_text(CALC_TOKENS), st.text(max_size=40)))
def test_calc_expressions_compile_or_are_refused(text):
    """A refusal points into the expression; what compiles is a FLEQ program that assembles.
    The input x is given only where the text names it: an unused input is refused."""
    try:
        compiled = compile_expression(text, {"x": 2.0} if "x" in text else {})
    except InputError as error:
        if isinstance(error, SourceError):
            assert re.search(r"^<expression>:1:\d+: error: ", str(error), re.M), str(error)
            assert "^" in str(error)
    else:
        FLEQ.assemble_text(compiled.source, "<calc>")
