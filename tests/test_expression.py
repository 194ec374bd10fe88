"""Calculator expressions: precedence, postfix %, unary minus, located errors."""

import pytest

from assembler.diagnostics import SourceError
from assembler.expression import Name, Number, Operation, parse_expression


def shape(node):
    """The tree as nested tuples, e.g. ('add', 'a', ('mul', 'b', 2.0))."""
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Name):
        return node.name
    assert isinstance(node, Operation)
    return (node.op, *(shape(o) for o in node.operands))


@pytest.mark.parametrize("text, tree", [
    ("a + b * 2", ("add", "a", ("mul", "b", 2.0))),
    ("(a + b) * 2", ("mul", ("add", "a", "b"), 2.0)),
    ("a - b - c", ("sub", ("sub", "a", "b"), "c")),
    ("a / b / c", ("div", ("div", "a", "b"), "c")),
    ("-a * b", ("mul", ("neg", "a"), "b")),
    ("50% * x", ("mul", ("percent", 50.0), "x")),
    ("sqrt(x)%", ("percent", ("sqrt", "x"))),
    ("1.5e2 - .5", ("sub", 150.0, 0.5)),
    ("sqrtx * 2", ("mul", "sqrtx", 2.0)),
])
def test_precedence_and_associativity(text, tree):
    assert shape(parse_expression(text)) == tree


def test_nodes_know_their_columns():
    tree = parse_expression("a + sqrt(b)")
    assert (tree.operands[1].column, tree.operands[1].width) == (5, 7)


@pytest.mark.parametrize("text, message, column", [
    ("a + ", "unexpected end of expression", 5),
    ("a $ b", "unexpected character '$'", 3),
    ("(a + b", "unexpected end of expression", 7),
    ("a b", "unexpected 'b'", 3),
    ("", "empty expression", 1),
    ("sqrt 4", "unexpected '4'", 6),
])
def test_errors_point_at_the_spot(text, message, column):
    with pytest.raises(SourceError) as caught:
        parse_expression(text)
    assert caught.value.message.startswith(message)
    assert caught.value.column == column
    assert "^" in str(caught.value)


def grouped_sum(operators: int) -> str:
    """A sum of ones with at least `operators` '+' signs, in groups of 50 terms so that no
    chain is deeper than the nesting limit."""
    group = "(" + "+".join(["1"] * 50) + ")"
    return "+".join([group] * (operators // 50 + 1))


def test_an_expression_with_too_many_operators_is_refused_at_the_first_one_past():
    text = grouped_sum(2_100)
    first_past = [column for column, c in enumerate(text, 1) if c == "+"][2_000]
    with pytest.raises(SourceError) as caught:
        parse_expression(text)
    assert caught.value.message.startswith("more than 2,000 operators")
    assert (caught.value.file, caught.value.column) == ("<expression>", first_past)


def test_an_expression_at_the_operator_limit_parses():
    text = grouped_sum(1_960)
    assert 1_960 <= text.count("+") <= 2_000
    parse_expression(text)


def test_an_overlong_expression_is_refused_before_it_is_parsed():
    text = "1" + " " * 30_000 + "+1"
    with pytest.raises(SourceError) as caught:
        parse_expression(text)
    assert caught.value.message.startswith("expression longer than 20,000 characters")
    assert caught.value.column == 20_001
