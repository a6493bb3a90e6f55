"""A filter over a DataFrame's columns, such as `model == 'vit_c_tiny' and top1_err < 5`: parsed, never run.

The expression is parsed with Python's `ast` and evaluated here, node by node, over the frame's
columns; nothing in it is executed as code. The language:

    condition := condition and condition | condition or condition | not condition
               | value op value [op value ...]            op: == != < <= > >=  (chained: 1 < lr < 2)
               | value in [literal, ...] | value not in (literal, ...)
               | a boolean column
    value     := column | literal | value arith value | -value | +value      arith: + - * / // % **
    literal   := number | 'string' | True | False | None
    column    := a name that is a column of the frame

`&`, `|` and `~` are `and`, `or` and `not`, with their precedence (as in DataFrame.query: `a < 1 & b > 2`
is `(a < 1) and (b > 2)`). Arithmetic takes numbers and numeric columns only. The rest is
DataFrame.query's: a comparison with a missing value is false (`!=` true), strings compare by value,
`in` is Series.isin. Anything else (calls, attributes, subscripts, `@` names, lambdas, f-strings, ...),
a name that is no column, a result that is not a condition, an expression over MAX_LENGTH characters
or nested over MAX_DEPTH levels is a QueryError naming it.
"""

import ast
import io
import itertools
import operator
import tokenize
import warnings
from typing import Any, Callable, ClassVar, Dict, Type

import numpy as np
import pandas as pd

from hpstudy.trainers.errors import HpstudyError, printable, shown

MAX_LENGTH = 1000  # characters of an expression
MAX_DEPTH = 50  # levels of its parsed tree: the evaluator recurses once per level
LISTED = 40  # columns a message lists
ALLOWED = (
    "allowed: column names, numbers, strings, True, False, None, == != < <= > >=, "
    "in / not in [literals], and or not (& | ~), + - * / // % **"
)
CONDITIONS = "conditions are comparisons, in / not in, and / or / not of conditions, or a boolean column"

COMPARISONS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
REFUSED = {
    ast.Call: "calls are not allowed",
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts are not allowed",
    ast.Lambda: "lambdas are not allowed",
    **dict.fromkeys((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp), "comprehensions are not allowed"),
    ast.JoinedStr: "f-strings are not allowed",
    ast.NamedExpr: "assignments (:=) are not allowed",
    ast.IfExp: "conditional expressions are not allowed",
    ast.Starred: "starred expressions are not allowed",
    ast.List: "a list is allowed only after in / not in",
    ast.Tuple: "a tuple is allowed only after in / not in",
}


class QueryError(HpstudyError):
    """A filter expression outside the language, or one that names a column the frame lacks."""


def filter_rows(frame: pd.DataFrame, expr: str) -> pd.DataFrame:
    """The rows of `frame` for which the filter `expr` is true (QueryError if it is no filter)."""
    if not isinstance(frame, pd.DataFrame):
        raise QueryError(f"query: frame: bad value {shown(type(frame).__name__)}; allowed: a pandas DataFrame")
    if not isinstance(expr, str):
        raise QueryError(f"query: bad value {shown(expr)}; allowed: a filter expression (text)")
    if len(expr) > MAX_LENGTH:
        raise QueryError(f"query {shown(expr)}: {len(expr)} characters; at most {MAX_LENGTH} allowed")
    try:
        expr.encode("utf-8")
    except UnicodeEncodeError as exc:  # a command line's byte that is not UTF-8, read as a lone surrogate
        raise QueryError(
            f"query {shown(expr)}: not UTF-8 text (character {exc.start + 1}, {shown(expr[exc.start])}, stands for "
            f"a byte that is not UTF-8); {ALLOWED}"
        ) from None
    text = expr.strip()
    try:
        with warnings.catch_warnings():  # `1or lr`: Python's SyntaxWarning would be a second line on stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(text, mode="eval")  # a syntax error is reported in the user's own text
            source = _pandas_precedence(text)
            tree = ast.parse(source, mode="eval")  # `[*lr & wd]` parses only before the rewrite
    except SyntaxError as exc:  # null bytes too
        raise QueryError(f"query {shown(expr)}: not an expression ({printable(str(exc.msg))}); {ALLOWED}") from None
    except ValueError as exc:  # null bytes on earlier Python 3.11 releases (3.11.2), whose ast.parse raises this
        raise QueryError(f"query {shown(expr)}: not an expression ({printable(str(exc))}); {ALLOWED}") from None
    except tokenize.TokenError as exc:
        raise QueryError(f"query {shown(expr)}: not an expression ({printable(str(exc.args[0]))}); {ALLOWED}") from None
    if _depth(tree) > MAX_DEPTH:
        raise QueryError(f"query {shown(expr)}: nested more than {MAX_DEPTH} levels deep")
    mask = _Filter(frame, expr, source).condition(tree.body)
    if not isinstance(mask, pd.Series):  # a condition on no column, e.g. `1 < 2`: the same for every row
        mask = pd.Series(bool(mask), index=frame.index)
    # a comparison with a missing value of a nullable dtype (Int64, string[pyarrow]) is NA: no match
    return frame.loc[mask.fillna(False).to_numpy(dtype=bool)]


def _pandas_precedence(text: str) -> str:
    """`text` with each `&` and `|` token written `and` and `or`."""
    starts = list(itertools.accumulate(map(len, io.StringIO(text).readlines()), initial=0))
    pieces, last = [], 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.OP and token.string in ("&", "|"):
            at = starts[token.start[0] - 1] + token.start[1]
            pieces += [text[last:at], " and " if token.string == "&" else " or "]
            last = at + 1
    return "".join(pieces) + text[last:]


def _depth(tree: ast.AST) -> int:
    """Levels of `tree`, counted without recursion (a deep tree is what this guards against)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _power(base: Any, exponent: Any) -> Any:
    # two Python numbers: as floats, so that 9 ** 9 ** 9 overflows at once instead of computing for hours
    if not isinstance(base, pd.Series) and not isinstance(exponent, pd.Series):
        return float(base) ** float(exponent)
    return base**exponent


ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
}


def _listed(columns: pd.Index) -> str:
    """The column names for a message: printable, the first LISTED of them."""
    names = [printable(str(name)) for name in columns[:LISTED]]
    return ", ".join(names) + (f", ... ({len(columns)} in all)" if len(columns) > LISTED else "")


def _isin(value: Any, values: list) -> Any:
    return value.isin(values) if isinstance(value, pd.Series) else value in values


def _negate(condition: Any) -> Any:
    return ~condition if isinstance(condition, pd.Series) else not condition


class _Filter:
    """Evaluates a parsed expression over a frame's columns: a value is a column (Series) or a Python scalar."""

    def __init__(self, frame: pd.DataFrame, expr: str, source: str):
        self.frame, self.expr, self.source = frame, expr, source

    def error(self, node: ast.AST, problem: str, hint: str = ALLOWED) -> QueryError:
        part = ast.get_source_segment(self.source, node)
        return QueryError(f"query {shown(self.expr)}: {problem}: {shown(part)}; {hint}")

    def value(self, node: ast.AST) -> Any:
        handler = self.HANDLERS.get(type(node))
        if handler is None:
            raise self.error(node, REFUSED.get(type(node), f"{type(node).__name__} expressions are not allowed"))
        return handler(self, node)

    def condition(self, node: ast.AST) -> Any:
        value = self.value(node)
        if isinstance(value, pd.Series) and pd.api.types.is_bool_dtype(value) or isinstance(value, bool):
            return value
        raise self.error(node, "not a condition (true or false for each row)", CONDITIONS)

    def number(self, node: ast.AST) -> Any:
        value = self.value(node)
        if isinstance(value, pd.Series) and pd.api.types.is_numeric_dtype(value) or isinstance(value, (int, float)):
            return value
        raise self.error(node, "arithmetic takes numbers and numeric columns only, not")

    def apply(self, node: ast.AST, op, *operands) -> Any:
        try:
            with np.errstate(all="ignore"):  # x / 0 is inf and 0 / 0 NaN, as in pandas, without a warning
                return op(*operands)
        except (TypeError, ValueError, ArithmeticError, NotImplementedError) as exc:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise self.error(node, "cannot evaluate", printable(reason)[:200])

    def literal(self, node: ast.Constant) -> Any:
        if node.value is None or isinstance(node.value, (bool, int, float, str)):
            return node.value
        raise self.error(node, "literals are numbers, strings, True, False or None, not")

    def column(self, node: ast.Name) -> pd.Series:
        found = [i for i, name in enumerate(self.frame.columns) if isinstance(name, str) and name == node.id]
        if not found:
            raise self.error(node, "unknown column", f"columns: {_listed(self.frame.columns)}")
        if len(found) > 1:
            raise self.error(node, f"the table has {len(found)} columns of this name", "allowed: a name of one column")
        return self.frame.iloc[:, found[0]]

    def boolean(self, node: ast.BoolOp) -> Any:
        join = operator.and_ if isinstance(node.op, ast.And) else operator.or_
        result = self.condition(node.values[0])
        for operand in node.values[1:]:
            result = join(result, self.condition(operand))
        return result

    def unary(self, node: ast.UnaryOp) -> Any:
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return _negate(self.condition(node.operand))
        return self.apply(
            node, operator.neg if isinstance(node.op, ast.USub) else operator.pos, self.number(node.operand)
        )

    def arithmetic(self, node: ast.BinOp) -> Any:
        op = ARITHMETIC.get(type(node.op))
        if op is None:
            raise self.error(node, "operators other than + - * / // % ** are not allowed")
        return self.apply(node, op, self.number(node.left), self.number(node.right))

    def compare(self, node: ast.Compare) -> Any:
        result, left = True, self.value(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                right = self.literals(comparator)
                test = self.apply(node, _isin, left, right)
                test = _negate(test) if isinstance(op, ast.NotIn) else test
            elif type(op) in COMPARISONS:
                right = self.value(comparator)
                test = self.apply(node, COMPARISONS[type(op)], left, right)
            else:
                raise self.error(node, "is / is not are not allowed (use == / !=)")
            result, left = result & test, right
        return result

    def literals(self, node: ast.AST) -> list:
        """The right side of in / not in: a list or tuple of literals (or arithmetic on them)."""
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise self.error(node, "in / not in take a list or tuple of literals, not")
        values = [self.value(element) for element in node.elts]
        if any(isinstance(value, pd.Series) for value in values):
            raise self.error(node, "in / not in take a list or tuple of literals, not columns")
        return values

    # the whitelist: any other node is refused (REFUSED says why, for the common ones)
    HANDLERS: ClassVar[Dict[Type[ast.AST], Callable[..., Any]]] = {
        ast.Constant: literal,
        ast.Name: column,
        ast.BoolOp: boolean,
        ast.UnaryOp: unary,
        ast.BinOp: arithmetic,
        ast.Compare: compare,
    }
