"""Parameter rules of the public functions, declared once next to each function and checked on every call.

As scikit-learn's ``_parameter_constraints``: a function declares, per parameter, the list of what it accepts (a
type, ``None``, an :class:`Interval` or :class:`Options`), and :func:`validate_params` checks a call against it
before the function runs. A call that breaks a rule raises :class:`InvalidParameterError` (a ``ValueError``) naming
the parameter, so the command line maps it to its flag and says the same thing Python says.

Example:
    >>> @validate_params({"k": [Interval(int, 2, None)], "how": [Options({"log", "nnls"})]})
    ... def fit(k: int = 10, how: str = "log") -> int:
    ...     return k
    >>> try:
    ...     fit(1)
    ... except InvalidParameterError as e:
    ...     print(e.param, "|", e)
    k | k: must be an integer >= 2; got 1
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["InvalidParameterError", "Interval", "Options", "validate_params", "check_param"]

F = TypeVar("F", bound=Callable[..., Any])


class InvalidParameterError(ValueError):
    """A parameter of a public function broke its declared rule.

    Attributes:
        param: the parameter's name (the CLI maps it to its flag).
        reason: what the rule asks and what was given.
    """

    def __init__(self, param: str, reason: str) -> None:
        self.param = param
        self.reason = reason
        super().__init__(f"{param}: {reason}")


@dataclass(frozen=True)
class Interval:
    """A number of a type within bounds (``None``: unbounded on that side).

    Attributes:
        kind: ``int`` or ``float`` (a ``float`` interval accepts integers too; neither accepts ``bool``).
        lo, hi: the bounds.
        closed: which bounds belong to the interval: ``both``, ``left``, ``right`` or ``neither``.
    """

    kind: type
    lo: float | None
    hi: float | None
    closed: str = "both"

    def accepts(self, v: Any) -> bool:
        """Whether ``v`` is of the kind and within the bounds (a non-finite number never is)."""
        if isinstance(v, bool) or not isinstance(v, (int, float) if self.kind is float else self.kind):
            return False
        if not math.isfinite(v):
            return False
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.lo is not None and (v < self.lo or (v == self.lo and not left)):
            return False
        return not (self.hi is not None and (v > self.hi or (v == self.hi and not right)))

    def __str__(self) -> str:
        what = "an integer" if self.kind is int else "a finite number"
        lo = None if self.lo is None else (">= " if self.closed in ("both", "left") else "> ") + f"{self.lo:g}"
        hi = None if self.hi is None else ("<= " if self.closed in ("both", "right") else "< ") + f"{self.hi:g}"
        return " ".join([what, " and ".join(b for b in (lo, hi) if b)]).strip()


@dataclass(frozen=True)
class Options:
    """One of a set of strings."""

    values: frozenset[str]

    def __init__(self, values: Iterable[str]) -> None:
        object.__setattr__(self, "values", frozenset(values))

    def accepts(self, v: Any) -> bool:
        """Whether ``v`` is one of the values."""
        return isinstance(v, str) and v in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(sorted(self.values))


def _accepts(rule: Any, v: Any) -> bool:
    if rule is None:
        return v is None
    if isinstance(rule, (Interval, Options)):
        return rule.accepts(v)
    if isinstance(rule, type):
        if rule is int:
            return isinstance(v, int) and not isinstance(v, bool)
        return isinstance(v, rule)
    if callable(rule):  # a predicate with a docstring saying what it accepts
        return bool(rule(v))
    raise TypeError(f"not a parameter rule: {rule!r}")


def _describe(rule: Any) -> str:
    if rule is None:
        return "None"
    if isinstance(rule, type):
        return {int: "an integer", float: "a number", str: "a string", bool: "True or False"}.get(
            rule, f"a {rule.__name__}"
        )
    if isinstance(rule, (Interval, Options)):
        return str(rule)
    return (getattr(rule, "__doc__", None) or getattr(rule, "__name__", "valid")).strip().rstrip(".")


def check_param(name: str, value: Any, rules: list[Any]) -> None:
    """Check one value against the rules of its parameter.

    Raises:
        InvalidParameterError: ``value`` meets none of ``rules``.
    """
    if any(_accepts(r, value) for r in rules):
        return
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise InvalidParameterError(name, f"must be {' or '.join(_describe(r) for r in rules)}; got {shown}")


def validate_params(constraints: Mapping[str, list[Any]]) -> Callable[[F], F]:
    """Declare a function's parameter rules and check every call against them before it runs.

    The rules are kept on the function as ``_parameter_constraints``, where tests and the docs read them.

    Args:
        constraints: parameter name -> what it accepts (types, ``None``, :class:`Interval`, :class:`Options`,
            or a predicate whose docstring says what it accepts).

    Raises:
        TypeError: (at declaration) a rule names a parameter the function does not have.
    """

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        unknown = set(constraints) - set(sig.parameters)
        if unknown:
            raise TypeError(f"{fn.__qualname__}: rules for parameters it does not have: {sorted(unknown)}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            for name, rules in constraints.items():
                if name in bound.arguments:
                    check_param(name, bound.arguments[name], rules)
            return fn(*args, **kwargs)

        wrapper._parameter_constraints = dict(constraints)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
