"""A tiny symbolic expression type for shapes, FLOPs and bytes.

Layer templates are written once with named dimensions (``b``, ``s``, ``h``, ``tp`` ...); a plan
binds them late. Expressions compile to a Python lambda on first use, so binding thousands of
plans costs one function call per expression, not a tree walk (symbolic work stays off the hot
path).

>>> b, s, h = syms("b s h")
>>> flops = 2 * b * s * h * h
>>> str(flops)
'2*b*s*h*h'
>>> flops.evaluate({"b": 1, "s": 2048, "h": 4})
65536.0
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Union

Number = int | float
ExprLike = Union["Expr", int, float]

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


class Expr(ABC):
    """An arithmetic expression over named dimensions (immutable)."""

    __slots__ = ("_fn",)

    def __init__(self) -> None:
        self._fn: Callable[[Mapping[str, float]], float] | None = None

    # -- construction -------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        return _bin("+", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return _bin("+", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return _bin("-", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return _bin("-", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return _bin("*", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return _bin("*", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return _bin("/", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return _bin("/", other, self)

    # -- inspection ---------------------------------------------------------------------
    @abstractmethod
    def symbols(self) -> frozenset[str]:
        """Names this expression depends on."""

    @abstractmethod
    def source(self) -> str:
        """Python source of this expression over a mapping named ``d``."""

    @abstractmethod
    def _str(self, parent_prec: int) -> str:
        """Text form, parenthesized when binding looser than ``parent_prec``."""

    def __str__(self) -> str:
        return self._str(0)

    def __repr__(self) -> str:
        return f"Expr({self})"

    # -- binding ------------------------------------------------------------------------
    def evaluate(self, env: Mapping[str, float]) -> float:
        """Value under ``env`` (a mapping of every symbol to a number)."""
        fn = self._fn
        if fn is None:
            fn = eval(f"lambda d: float({self.source()})", {})
            self._fn = fn
        try:
            return fn(env)
        except KeyError as exc:
            raise KeyError(f"unbound dimension {exc.args[0]!r} in {self}") from None


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value: Number) -> None:
        super().__init__()
        self.value = float(value)

    def symbols(self) -> frozenset[str]:
        return frozenset()

    def source(self) -> str:
        return repr(self.value)

    def _str(self, parent_prec: int) -> str:
        v = self.value
        return str(int(v)) if v == int(v) else repr(v)


class Sym(Expr):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        if not name.isidentifier():
            raise ValueError(f"bad dimension name {name!r}")
        self.name = name

    def symbols(self) -> frozenset[str]:
        return frozenset({self.name})

    def source(self) -> str:
        return f"d[{self.name!r}]"

    def _str(self, parent_prec: int) -> str:
        return self.name


class BinOp(Expr):
    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Expr, right: Expr) -> None:
        super().__init__()
        self.op, self.left, self.right = op, left, right

    def symbols(self) -> frozenset[str]:
        return self.left.symbols() | self.right.symbols()

    def source(self) -> str:
        return f"({self.left.source()}{self.op}{self.right.source()})"

    def _str(self, parent_prec: int) -> str:
        prec = _PREC[self.op]
        # right operand of - and / needs parentheses at equal precedence
        right_prec = prec + 1 if self.op in "-/" else prec
        text = f"{self.left._str(prec)}{self.op}{self.right._str(right_prec)}"
        return f"({text})" if prec < parent_prec else text


def _lift(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (int, float)):
        return Const(x)
    raise TypeError(f"cannot use {type(x).__name__} in an expression")


def _bin(op: str, a: ExprLike, b: ExprLike) -> Expr:
    left, right = _lift(a), _lift(b)
    # light constant folding keeps printed templates readable
    if isinstance(left, Const) and isinstance(right, Const):
        return Const(eval(f"{left.value}{op}{right.value}"))
    if op == "*":
        if isinstance(left, Const) and left.value == 1:
            return right
        if isinstance(right, Const) and right.value == 1:
            return left
    if op == "/" and isinstance(right, Const) and right.value == 1:
        return left
    if op == "+":
        if isinstance(left, Const) and left.value == 0:
            return right
        if isinstance(right, Const) and right.value == 0:
            return left
    return BinOp(op, left, right)


def syms(names: str) -> tuple[Sym, ...]:
    """``syms("b s h")`` -> three symbols."""
    return tuple(Sym(n) for n in names.split())


def lift(x: ExprLike) -> Expr:
    """A number or expression as an expression."""
    return _lift(x)
