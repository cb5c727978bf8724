"""Configuration spaces: grids from TOML, constraints, enumeration, seeded sampling and ids.

The grids range over whatever family (:mod:`carb.families`) they name.

A :class:`Space` is a union of grids read from TOML (see ``carb/spaces/*.toml``), with
optional constraints, and supports ``len()``, iteration, :meth:`Space.sample` and
:meth:`Space.to_frame`. A grid's ``family`` values say which family's parameters it sets
(default ``cifar``); each config is its family's config object, and its
``config_id`` (a stable hash of its canonical form) is the key everywhere (store, datasets,
predictions).

It also offers the names its callers use with it: the ResNet config (:class:`Config`,
:data:`PARAMETERS`, :func:`config_id`) of :mod:`carb.families.resnet` and :class:`SpaceError`.
"""

from __future__ import annotations

import ast
import itertools
import operator
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from carb import families
from carb._safeio import MAX_TOML_BYTES, DocumentError, loads_toml, read_text
from carb.families._base import (
    MAX_BATCH,
    MAX_CLASSES,
    MAX_INPUT_SIZE,
    PRECISIONS,
    SpaceError,
    _as_bool,
    _as_float,
    _as_int,
)
from carb.families.resnet import (
    BLOCKS,
    FAMILIES,
    MAX_DEPTH,
    MAX_WIDTH,
    PARAMETERS,
    REQUIRED_COLUMNS,
    Config,
    config_id,
)
from carb.families.resnet import config_ids as _resnet_config_ids

__all__ = [
    "Config",
    "Space",
    "SpaceError",
    "PARAMETERS",
    "load",
    "builtin_names",
    "config_id",
    "configs_from_frame",
]
#: upper limits of the integer parameters a grid may set
_UPPER = {"depth": MAX_DEPTH, "input_size": MAX_INPUT_SIZE, "batch": MAX_BATCH, "classes": MAX_CLASSES}


def configs_from_frame(df: pd.DataFrame) -> list[Any]:
    """Configs from the parameter columns of a DataFrame (other columns are ignored).

    Rows of other families than the ResNets (``family`` column) become their family's configs (:mod:`carb.families`).
    """
    i = 0
    try:  # a bad row is named by its position (0-based, header excluded)
        if "family" in df.columns and not df["family"].isin(FAMILIES).all():
            out = []
            for i, row in enumerate(df.to_dict("records")):
                out.append(families.config_from_row(row))
            return out
        cols = [c for c in PARAMETERS if c in df.columns]
        out = []
        for i, row in enumerate(df[cols].itertuples(index=False, name=None)):
            out.append(Config.from_dict(dict(zip(cols, row))))
        return out
    except SpaceError as e:
        raise SpaceError(f"row {i}: {e}") from None


def config_ids(df: pd.DataFrame) -> np.ndarray:
    """The ``config_id`` of every row of a table of configs.

    ResNet tables are vectorized: a million rows in seconds, byte-identical to ``Config.config_id``.

    Raises:
        SpaceError: a row is not a valid config (the message names the row).
    """
    if "family" in df.columns and not df["family"].isin(FAMILIES).all():
        return np.array([c.config_id for c in configs_from_frame(df)], dtype=object)
    return _resnet_config_ids(df)


def with_config_ids(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a verified ``config_id`` column first.

    A user's ``config_id`` column is never copied through on trust: it must equal the id of the row's parameters, else a
    :class:`SpaceError` names the first row that differs (drop the column to let carb compute it).
    """
    ids = config_ids(df)
    if "config_id" in df.columns:
        given = df["config_id"].astype(str).to_numpy()
        bad = np.flatnonzero(given != ids.astype(str))
        if len(bad):
            i = int(bad[0])
            raise SpaceError(
                f"row {i}: config_id {given[i]!r} is not the id of its parameters ({ids[i]}); "
                f"{len(bad):,} row(s) differ (drop the config_id column and carb computes it)"
            )
        return df
    out = df.copy()
    out.insert(0, "config_id", ids)
    return out


def missing_columns(df: pd.DataFrame) -> list[str]:
    """The parameter columns a table of configs lacks.

    A missing column is never filled with a default (a file of widths 0.25/0.5 must not be measured at width 1.0).
    ``family`` is always needed; ResNet rows need :data:`carb.families.resnet.REQUIRED_COLUMNS` (``classes`` may be
    absent: the family's default), other families' rows their run parameters (their own readers check the rest).
    """
    if "family" not in df.columns:
        return [c for c in REQUIRED_COLUMNS if c not in df.columns]
    fams = set(map(str, df["family"].dropna().unique()))
    need = list(REQUIRED_COLUMNS) if fams & set(FAMILIES) or not fams else ["family"]
    if fams - set(FAMILIES):
        need += [c for c in ("input_size", "batch", "precision") if c not in need]
    return [c for c in need if c not in df.columns]


# --- constraints: a tiny, safe expression language over the parameters -----------------

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


#: The longest constraint accepted (characters) and its deepest nesting (levels of its syntax tree). A constraint is
#: a line written by hand; Python's parser and the evaluator recurse once per level, so ``-(-(-...`` or ``1+1+...``
#: thousands of terms long would end in a RecursionError or a MemoryError.
_MAX_CONSTRAINT_CHARS = 1_000
_MAX_CONSTRAINT_DEPTH = 32


def _tree_depth(tree: ast.AST) -> int:
    """The depth of a syntax tree, walked without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _compile_constraint(expr: str, where: str, names: Iterable[str] = PARAMETERS) -> ast.Expression:
    if len(expr) > _MAX_CONSTRAINT_CHARS:
        raise SpaceError(
            f"{where}: constraint {expr[:40]!r}... of {len(expr):,} characters, above the limit of "
            f"{_MAX_CONSTRAINT_CHARS:,}"
        )
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise SpaceError(f"{where}: constraint {expr!r} is not an expression ({e.msg})") from None
    except (RecursionError, MemoryError):
        tree = None
    if tree is None or _tree_depth(tree) > _MAX_CONSTRAINT_DEPTH:
        shown = repr(expr) if len(expr) <= 60 else f"{expr[:60]!r}..."
        raise SpaceError(f"{where}: constraint {shown} nests deeper than {_MAX_CONSTRAINT_DEPTH} levels (the limit)")
    allowed = (
        ast.Expression,
        ast.BoolOp,
        ast.And,
        ast.Or,
        ast.UnaryOp,
        ast.Not,
        ast.USub,
        ast.BinOp,
        ast.Compare,
        ast.Name,
        ast.Load,
        ast.Constant,
        ast.Tuple,
        ast.List,
        *_BINOPS,
        *_CMPOPS,
    )
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise SpaceError(
                f"{where}: constraint {expr!r} uses {type(node).__name__}, not allowed "
                "(use parameters, numbers, strings, arithmetic, comparisons, and/or/not)"
            )
        if isinstance(node, ast.Name) and node.id not in names and node.id not in ("true", "false"):
            raise SpaceError(f"{where}: constraint {expr!r} names unknown parameter {node.id!r}")
    return tree


_MAX_EXPONENT = 256
#: the largest object a constraint may build: a string or tuple of this many items, an integer of this many bits
_MAX_SIZE = 10_000
#: The largest space (counted as :meth:`Space.size_bound`) that carb lists in memory;
#: beyond it, only uniform samples (:meth:`Space.sample`), which never list the space.
MAX_CONFIGS = 2_000_000


def _size(v: Any) -> int:
    """The size a constraint's value takes: the items of a string or tuple, the bits of an integer, else 1."""
    if isinstance(v, (str, tuple)):
        return len(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return abs(v).bit_length()
    return 1


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse an operation whose result would exceed :data:`_MAX_SIZE`, before computing it.

    Python's integers never overflow and a string repeats to any length: ``2 ** 10**9`` would run for minutes and
    ``'a' * 2**34`` allocate 17 GB. String formatting (``'%s' % x``) is refused as well: its width is unbounded.
    """
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > _MAX_EXPONENT:
        raise SpaceError(f"exponent {right!r} is above the limit {_MAX_EXPONENT}")
    if isinstance(op, ast.Mod) and isinstance(left, str):
        raise SpaceError("string formatting ('...' % x) is not allowed in a constraint")
    if isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and right > 0:
        size = _size(left) * right
    elif isinstance(op, ast.Mult) and isinstance(left, (str, tuple)) and isinstance(right, int):
        size = _size(left) * right
    elif isinstance(op, ast.Mult) and isinstance(right, (str, tuple)) and isinstance(left, int):
        size = _size(right) * left
    else:
        size = _size(left) + _size(right)
    if size > _MAX_SIZE:
        raise SpaceError(f"the result would be of size {size:,}, above the limit {_MAX_SIZE:,} (items or bits)")


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return {"true": True, "false": False}.get(node.id, env.get(node.id))
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        _check_size(node.op, left, right)
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    raise SpaceError(f"unsupported expression node {type(node).__name__}")


# --- spaces ----------------------------------------------------------------------------


class Space:
    """A finite configuration space: the union of one or more grids, minus what the constraints exclude.

    Configs are enumerated once, in a stable order, without duplicates.

    Args:
        name: the space's name.
        grids: list of mappings parameter -> list of values; parameters absent from a grid
            take their family's default (``family`` itself defaults to ``cifar``).
        constraints: expressions over the parameters (e.g. ``"batch * input_size**2 <= 2**20"``)
            that every config must satisfy.
        description: free text.
        source: where the space came from (file path or ``builtin:NAME``), used in errors.
    """

    def __init__(
        self,
        name: str,
        grids: list[Mapping[str, list[Any]]],
        constraints: Iterable[str] = (),
        description: str = "",
        source: str | None = None,
    ) -> None:
        """Build the space from its grids and constraints and validate it (see the class's Args)."""
        self.name = name
        self.description = description
        self.source = source or name
        self.grids = [dict(g) for g in grids]
        self.constraints = list(constraints)
        self._configs: list[Any] | None = None
        self._validate()

    # validation happens eagerly so that a bad file fails at load, naming file/key/value
    def _validate(self) -> None:
        where = self.source
        if not self.grids:
            raise SpaceError(f"{where}: no [[grid]] table: the space is empty")
        all_names: set[str] = set()
        for gi, grid in enumerate(self.grids):
            fams = grid.get("family", ["cifar"])
            fams = fams if isinstance(fams, list) else [fams]
            known = ["family"]
            for name in fams:
                try:
                    fam = families.get(name)
                except SpaceError as e:
                    raise SpaceError(f"{where}: grid {gi + 1}: {e}") from None
                known += [p for p in (fam.parameters or PARAMETERS) if p not in known]
            all_names.update(known)
            resnet_only = all(f in FAMILIES for f in fams)
            for key, values in grid.items():
                if key not in known:
                    raise SpaceError(f"{where}: grid {gi + 1}: unknown parameter {key!r} (known: {', '.join(known)})")
                if not isinstance(values, list):
                    grid[key] = values = [values]
                if not values:
                    raise SpaceError(f"{where}: grid {gi + 1}: {key} has no values: the space is empty")
                for v in values:
                    probe = {key: v}
                    # check the type and domain of each value on its own where possible
                    try:
                        if not resnet_only and key != "precision":
                            continue  # another family's values are checked when its configs are built
                        if key in ("family", "block", "precision"):
                            allowed = {"family": FAMILIES, "block": BLOCKS, "precision": PRECISIONS}[key]
                            if v not in allowed:
                                raise SpaceError(f"unknown value {v!r} (expected one of {', '.join(allowed)})")
                        elif key == "early_downsample":
                            _as_bool(key, v)
                        elif key == "width":
                            if not 0 < _as_float(key, v) <= MAX_WIDTH:
                                raise SpaceError(f"must be > 0 and <= {MAX_WIDTH:g}")
                        elif key in ("depth", "input_size", "batch", "classes"):
                            if _as_int(key, v) < 1:
                                raise SpaceError(f"{v!r} must be >= 1")
                            if v > _UPPER[key]:
                                raise SpaceError(f"above the limit {_UPPER[key]:,}")
                    except SpaceError as e:
                        msg = str(e).removeprefix(f"{key}: ")
                        raise SpaceError(f"{where}: grid {gi + 1}: {key} = {probe[key]!r}: {msg}") from None
        self._names = tuple(sorted(all_names))
        self._compiled = [_compile_constraint(c, where, self._names) for c in self.constraints]

    def size_bound(self) -> int:
        """The number of configs counted before building any: the sum over grids of the product of their value counts.

        Exact when there are no constraints and the grids do not overlap, an upper bound otherwise.
        """
        return sum(int(np.prod([len(v) for v in g.values()], dtype=object)) for g in self.grids)

    def size_text(self) -> str:
        """The size as text: ``"17,280 configs"``, or ``"at most 10,000,000 configs"``.

        The second form is used when constraints or overlapping grids may remove some (counted without building any).
        """
        exact = not self.constraints and len(self.grids) == 1
        return f"{'' if exact else 'at most '}{self.size_bound():,} configs"

    @property
    def configs(self) -> list[Any]:
        """All configs, enumerated on first use.

        Raises:
            SpaceError: the space is larger than :data:`MAX_CONFIGS` (say so, and the way
                out: a sample, which never lists the space).
        """
        if self._configs is None:
            if self.size_bound() > MAX_CONFIGS:
                raise SpaceError(
                    f"{self.source}: {self.size_text()} (the product of its grid sizes), above the "
                    f"{MAX_CONFIGS:,} carb lists in memory: take a uniform sample (carb characterize "
                    "--samples N --method uniform, Space.sample) or narrow the grids"
                )
            self._configs = self._enumerate()
        return self._configs

    def _build(self, gi: int, d: Mapping[str, Any]) -> Any:
        try:
            return Config.from_dict(d) if d.get("family", "cifar") in FAMILIES else families.config_from_row(d)
        except SpaceError as e:
            raise SpaceError(f"{self.source}: grid {gi + 1}: {e}") from None

    def _enumerate(self) -> list[Any]:
        seen: set[Any] = set()
        out: list[Any] = []
        for gi, grid in enumerate(self.grids):
            keys = list(grid)
            for values in itertools.product(*(grid[k] for k in keys)):
                d = dict(zip(keys, values))
                cfg = self._build(gi, d)
                if cfg in seen:
                    continue
                env = families.to_row(cfg)
                if self._admits(env, cfg):
                    seen.add(cfg)
                    out.append(cfg)
        if not out:
            raise SpaceError(f"{self.source}: the space is empty (the constraints exclude every config)")
        return out

    def _admits(self, env: Mapping[str, Any], cfg: Any) -> bool:
        """Whether a config satisfies every constraint.

        Raises:
            SpaceError: a constraint cannot be evaluated (division by zero, a string compared with a number, an
                overflow); the message names the file, the constraint and the config.
        """
        for expr, tree in zip(self.constraints, self._compiled):
            try:
                if not _eval(tree, env):
                    return False
            except SpaceError as e:
                raise SpaceError(f"{self.source}: constraint {expr!r} on {cfg.label()}: {e}") from None
            except (ArithmeticError, TypeError, ValueError, MemoryError) as e:
                raise SpaceError(
                    f"{self.source}: constraint {expr!r} fails on {cfg.label()}: {type(e).__name__}: {e}"
                ) from None
        return True

    def __len__(self) -> int:
        """The number of configs (enumerates the space)."""
        return len(self.configs)

    def __iter__(self) -> Iterator[Any]:
        """Iterate over the configs in order."""
        return iter(self.configs)

    def __getitem__(self, i: int) -> Any:
        """The ``i``-th config."""
        return self.configs[i]

    def __repr__(self) -> str:
        """``Space(name, size)``, without listing a space too large to list."""
        if self.size_bound() > MAX_CONFIGS:  # never list a huge space just to print it
            return f"Space({self.name!r}, {self.size_text()})"
        return f"Space({self.name!r}, {len(self)} configs)"

    def to_frame(self, configs: Iterable[Any] | None = None) -> pd.DataFrame:
        """DataFrame with one row per config: ``config_id`` and the parameter columns.

        The ResNet columns of :data:`PARAMETERS` come first; other families' parameters after them.
        """
        cs = self.configs if configs is None else list(configs)
        if all(isinstance(c, Config) for c in cs):
            df = pd.DataFrame([c.to_dict() for c in cs], columns=list(PARAMETERS))
        else:
            df = pd.DataFrame([families.to_row(c) for c in cs])
        df.insert(0, "config_id", [c.config_id for c in cs])
        return df

    def values(self) -> dict[str, list[Any]]:
        """Distinct values of each parameter over the space, sorted."""
        out: dict[str, set] = {}
        for c in self.configs:
            for k, v in families.to_row(c).items():
                out.setdefault(k, set()).add(tuple(v) if isinstance(v, list) else v)
        return {k: sorted(v, key=lambda x: (str(type(x)), x)) for k, v in out.items()}

    def sample(self, n: int, seed: int = 0, method: str = "uniform") -> list[Any]:
        """Draw ``n`` distinct configs (all of them when ``n >= len(self)``).

        Args:
            n: how many configs.
            seed: random seed; the same seed gives the same sample.
            method: ``uniform`` (simple random sample without replacement) or
                ``stratified`` (space-filling: greedy farthest-point over the parameters'
                level ranks, so that every value and combination is spread evenly).
        """
        if n < 0:
            raise SpaceError(f"sample: n = {n} must be >= 0")
        if self.size_bound() > MAX_CONFIGS:
            if method != "uniform":
                raise SpaceError(
                    f"{self.source}: {self.size_text()}: a {method} sample needs the whole space "
                    f"listed (at most {MAX_CONFIGS:,}); use --method uniform or narrow the grids"
                )
            return self._sample_unlisted(n, np.random.default_rng(seed))
        configs = self.configs
        if n >= len(configs):
            return list(configs)
        rng = np.random.default_rng(seed)
        if method == "uniform":
            idx = rng.choice(len(configs), size=n, replace=False)
            return [configs[i] for i in sorted(idx)]
        if method == "stratified":
            return [configs[i] for i in sorted(_farthest_point(self._level_matrix(), n, rng))]
        raise SpaceError(f"sample: unknown method {method!r} (expected uniform or stratified)")

    def _sample_unlisted(self, n: int, rng: np.random.Generator) -> list[Any]:
        """A uniform sample of a space too large to list, sorted by grid position.

        Random points of the grids (each grid in proportion to its size), decoded without enumerating, are kept when
        the constraints admit them and were not drawn already.
        """
        sizes = [int(np.prod([len(v) for v in g.values()], dtype=object)) for g in self.grids]
        total = sum(sizes)
        chosen: dict[Any, tuple[int, int]] = {}
        tries = 0
        while len(chosen) < n:
            if tries > 50 * n + 1000:
                raise SpaceError(
                    f"{self.source}: found only {len(chosen):,} of {n:,} configs that the constraints "
                    f"admit in {tries:,} random draws; narrow the grids"
                )
            tries += 1
            flat = int(rng.integers(total))
            gi = 0
            while flat >= sizes[gi]:
                flat -= sizes[gi]
                gi += 1
            grid = self.grids[gi]
            pos, d = flat, {}
            for k in reversed(list(grid)):  # the last key varies fastest, as itertools.product
                pos, j = divmod(pos, len(grid[k]))
                d[k] = grid[k][j]
            cfg = self._build(gi, dict(reversed(list(d.items()))))
            if cfg not in chosen and self._admits(families.to_row(cfg), cfg):
                chosen[cfg] = (gi, flat)
        return sorted(chosen, key=chosen.__getitem__)

    def _level_matrix(self) -> np.ndarray:
        """Each config as a vector of its parameters' level ranks scaled to [0, 1]."""
        vals = self.values()
        rows = [families.to_row(c) for c in self.configs]
        cols = []
        for p in vals:  # PARAMETERS order for ResNets, so that a seed keeps drawing the same samples
            levels = {v: i for i, v in enumerate(vals[p])}
            k = max(len(levels) - 1, 1)
            # a parameter a config's family lacks sits at level -1 (apart from every value)
            cols.append([levels.get(_hashable(r.get(p)), -1) / k for r in rows])
        return np.asarray(cols, dtype=np.float64).T


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _farthest_point(X: np.ndarray, n: int, rng: np.random.Generator) -> list[int]:
    """Greedy maximin selection of ``n`` rows of ``X`` (random start, random tie-breaks)."""
    if n == 0:
        return []
    # a tiny jitter breaks the many exact ties of a grid randomly but reproducibly
    Xj = X + rng.uniform(0, 1e-6, size=X.shape)
    first = int(rng.integers(len(X)))
    chosen = [first]
    d = np.sum((Xj - Xj[first]) ** 2, axis=1)
    for _ in range(n - 1):
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, np.sum((Xj - Xj[i]) ** 2, axis=1))
    return chosen


def builtin_names() -> list[str]:
    """Names of the spaces shipped with CARB."""
    return sorted(
        p.name.removesuffix(".toml") for p in resources.files("carb.spaces").iterdir() if p.name.endswith(".toml")
    )


def from_toml(text: str, source: str, default_name: str) -> Space:
    """Parse a space from TOML text. ``source`` names the file in error messages."""
    try:
        doc = loads_toml(text, source)
    except DocumentError as e:  # not TOML, too large or nested too deeply
        raise SpaceError(str(e)) from None
    known = {"name", "description", "grid", "constraints"}
    for key in doc:
        if key not in known:
            raise SpaceError(f"{source}: unknown key {key!r} (expected name, description, grid, constraints)")
    grids = doc.get("grid", [])
    if isinstance(grids, dict):
        grids = [grids]
    if not isinstance(grids, list) or not all(isinstance(g, dict) for g in grids):
        raise SpaceError(
            f"{source}: grid must be a table or an array of tables ([[grid]] with parameter = [values]), not {grids!r}"
        )
    constraints = doc.get("constraints", [])
    if isinstance(constraints, str):
        constraints = [constraints]
    if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
        raise SpaceError(f"{source}: constraints must be a list of expression strings, not {constraints!r}")
    for key in ("name", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise SpaceError(f"{source}: {key} must be a string, not {doc[key]!r}")
    return Space(
        name=doc.get("name", default_name),
        grids=grids,
        constraints=constraints,
        description=doc.get("description", ""),
        source=source,
    )


def load(name_or_path: str | Path) -> Space:
    """Load a built-in space by name (``paper``, ``screening``, ``cpu``, ...) or a TOML file."""
    s = str(name_or_path).removeprefix("builtin:")  # a Space's `source` loads it again
    if s in builtin_names():
        text = resources.files("carb.spaces").joinpath(f"{s}.toml").read_text()
        return from_toml(text, source=f"builtin:{s}", default_name=s)
    path = Path(s)
    if not path.exists():
        raise SpaceError(f"{s}: no such space (built-ins: {', '.join(builtin_names())}; or a TOML file path)")
    try:
        text = read_text(path, MAX_TOML_BYTES)
    except OSError as e:
        raise SpaceError(f"{s}: cannot read ({e})") from None
    except DocumentError as e:  # too large, or not UTF-8
        raise SpaceError(str(e)) from None
    return from_toml(text, source=str(path), default_name=path.stem)
