"""The small arithmetic a config may write for a user's shapes and FLOPs (`2*m*k*n`, `k//2`): names from the
suite's grid, integers, + - * / // ** and parentheses. Parsed with `ast` and walked here, never `eval`: a
config string runs no code."""

from __future__ import annotations

import ast
import operator
from typing import Any

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
MAX_POWER = 64  # 2**64 is the largest power a shape or FLOP count needs; a bigger one is a typo


class ExpressionError(ValueError):
    """What is wrong with an expression, as the end of a sentence."""


def names(text: str | int) -> set[str]:
    """The grid names an expression uses (an integer uses none); ExpressionError if it is not one."""
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ExpressionError(f"{text!r} is neither an integer nor an expression")
    if isinstance(text, int):
        return set()
    return {node.id for node in ast.walk(_parse(text)) if isinstance(node, ast.Name)}


def evaluate(text: str | int, values: dict[str, int]) -> int | float:
    """The value of an integer or an expression over `values` (a grid point)."""
    if isinstance(text, int):
        return text
    return _walk(_parse(text).body, values)


def _parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExpressionError(f"{text!r} is not an arithmetic expression") from None
    for node in ast.walk(tree):
        ok = isinstance(node, ast.Expression | ast.BinOp | ast.Name | ast.Load | ast.UnaryOp | ast.USub)
        ok = ok or type(node) in OPERATORS or (isinstance(node, ast.Constant) and type(node.value) is int)
        if not ok:
            raise ExpressionError(
                f"{text!r} uses {type(node).__name__}; only grid names, integers, + - * / // ** and "
                "parentheses are allowed"
            )
    return tree


def _walk(node: ast.AST, values: dict[str, int]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise ExpressionError(f"{node.id!r} is not a name of the grid ({', '.join(values) or 'none'})")
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_walk(node.operand, values)
    assert isinstance(node, ast.BinOp)  # _check admitted names, numbers, unary minus and these operators only
    left, right = _walk(node.left, values), _walk(node.right, values)
    if isinstance(node.op, ast.Pow) and abs(right) > MAX_POWER:
        raise ExpressionError(f"a power of {right} is beyond what a shape or a FLOP count needs")
    if isinstance(node.op, ast.Div | ast.FloorDiv) and right == 0:
        raise ExpressionError("it divides by zero at this grid point")
    return OPERATORS[type(node.op)](left, right)
