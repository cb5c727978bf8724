"""Configurations and configuration spaces.

A :class:`Config` is one point of a deployment space: the network (family, block, depth,
width multiplier, stem) and how it is run (input size, batch, precision). It is a plain,
frozen, hashable record; :attr:`Config.config_id` is a stable hash of its canonical form
and is the key everywhere (store, datasets, predictions).

A :class:`Space` is a union of grids read from TOML (see ``carb/spaces/*.toml``), with
optional constraints, and supports ``len()``, iteration, :meth:`Space.sample` and
:meth:`Space.to_frame`.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import operator
import tomllib
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

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

FAMILIES = ("cifar", "imagenet")
BLOCKS = ("basic", "bottleneck")
PRECISIONS = ("fp32", "fp16", "bf16")
#: torchvision's layer table for the imagenet family: depth -> (block, blocks per stage).
IMAGENET_LAYERS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
DEFAULT_CLASSES = {"cifar": 10, "imagenet": 1000}


class SpaceError(ValueError):
    """A space file or a config is invalid; the message is one line naming where and what."""


@dataclass(frozen=True)
class Config:
    """One CNN inference configuration.

    Attributes:
        family: ``cifar`` (3-stage ResNet of He et al. 2016, 16/32/64 base channels) or
            ``imagenet`` (4-stage ResNet with 7x7/2 stem and max-pool, 64..512 channels).
        block: ``basic`` or ``bottleneck`` (for imagenet, fixed by the depth).
        depth: number of weighted layers; cifar: 6n+2 (basic) or 9n+2 (bottleneck);
            imagenet: 18, 34, 50, 101 or 152.
        width: channel multiplier applied to the base channels (> 0).
        early_downsample: cifar only: a stride-2 stem, halving every feature map.
        input_size: input height = width, pixels.
        batch: images per forward pass.
        precision: ``fp32``, ``fp16`` or ``bf16`` (weights and activations).
        classes: classifier outputs; ``None`` means the family's default (10 or 1000).
    """

    family: str = "cifar"
    block: str = "basic"
    depth: int = 20
    width: float = 1.0
    early_downsample: bool = False
    input_size: int = 32
    batch: int = 1
    precision: str = "fp32"
    classes: int | None = None

    def __post_init__(self) -> None:
        # Normalise types so that equal configs hash equally whatever their source
        # (TOML ints for widths, numpy scalars from a DataFrame, ...).
        object.__setattr__(self, "depth", _as_int("depth", self.depth))
        object.__setattr__(self, "width", _as_float("width", self.width))
        object.__setattr__(self, "input_size", _as_int("input_size", self.input_size))
        object.__setattr__(self, "batch", _as_int("batch", self.batch))
        object.__setattr__(self, "early_downsample", _as_bool("early_downsample", self.early_downsample))
        if self.classes is None or (isinstance(self.classes, float) and np.isnan(self.classes)):
            object.__setattr__(self, "classes", DEFAULT_CLASSES.get(self.family, 10))
        else:
            object.__setattr__(self, "classes", _as_int("classes", self.classes))
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def problem(self) -> str | None:
        """Return why this config is invalid, or ``None`` when it is valid."""
        if self.family not in FAMILIES:
            return f"family: unknown value {self.family!r} (expected one of {', '.join(FAMILIES)})"
        if self.block not in BLOCKS:
            return f"block: unknown value {self.block!r} (expected one of {', '.join(BLOCKS)})"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        if not self.width > 0:
            return f"width: {self.width!r} must be > 0"
        if self.batch < 1:
            return f"batch: {self.batch!r} must be >= 1"
        if self.classes < 1:
            return f"classes: {self.classes!r} must be >= 1"
        if self.family == "cifar":
            step = 6 if self.block == "basic" else 9
            if self.depth < step + 2 or (self.depth - 2) % step:
                form = "6n+2" if self.block == "basic" else "9n+2"
                return f"depth: {self.depth} is not {form} (n >= 1) for cifar {self.block} blocks"
            if self.input_size < 8:
                return f"input_size: {self.input_size} too small for the cifar family (>= 8)"
        else:
            if self.depth not in IMAGENET_LAYERS:
                return f"depth: {self.depth} not an imagenet ResNet depth (18, 34, 50, 101, 152)"
            want = IMAGENET_LAYERS[self.depth][0]
            if self.block != want:
                return f"block: imagenet ResNet-{self.depth} uses {want} blocks, not {self.block!r}"
            if self.early_downsample:
                return "early_downsample: only the cifar family has it (the imagenet stem already downsamples)"
            if self.input_size < 32:
                return f"input_size: {self.input_size} too small for the imagenet family (>= 32)"
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the parameters (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Config":
        """Build a config from a mapping; unknown keys raise :class:`SpaceError`."""
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        return cls(**{k: _py(v) for k, v in d.items()})

    def canonical(self) -> str:
        """Canonical JSON text of the config; its hash is the config id."""
        d = self.to_dict()
        d["width"] = float(f"{self.width:.6g}")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical`."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    @property
    def arch_key(self) -> tuple:
        """The parameters that define the network alone (not batch or precision)."""
        return (self.family, self.block, self.depth, self.width, self.early_downsample,
                self.input_size, self.classes)

    def label(self) -> str:
        """Short human-readable label, e.g. ``cifar-basic20-w1-i32-b8-fp32``."""
        ed = "-ed" if self.early_downsample else ""
        return (f"{self.family}-{self.block}{self.depth}-w{self.width:g}{ed}-i{self.input_size}"
                f"-b{self.batch}-{self.precision}")


PARAMETERS: tuple[str, ...] = tuple(f.name for f in fields(Config))


def config_id(config: Config | Mapping[str, Any]) -> str:
    """Config id of a config or a plain dict of parameters."""
    if not isinstance(config, Config):
        config = Config.from_dict(config)
    return config.config_id


def configs_from_frame(df: pd.DataFrame) -> list[Any]:
    """Configs from the parameter columns of a DataFrame (other columns are ignored). Rows
    of other families than the ResNets (``family`` column) become their family's configs
    (:mod:`carb.families`)."""
    if "family" in df.columns and not df["family"].isin(FAMILIES).all():
        from carb import families

        return [families.config_from_row(row) for row in df.to_dict("records")]
    cols = [c for c in PARAMETERS if c in df.columns]
    return [Config.from_dict(dict(zip(cols, row))) for row in df[cols].itertuples(index=False, name=None)]


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _as_int(name: str, v: Any) -> int:
    v = _py(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise SpaceError(f"{name}: {v!r} is not an integer")
    return int(v)


def _as_float(name: str, v: Any) -> float:
    v = _py(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpaceError(f"{name}: {v!r} is not a number")
    return float(v)


def _as_bool(name: str, v: Any) -> bool:
    v = _py(v)
    if isinstance(v, bool):
        return v
    raise SpaceError(f"{name}: {v!r} is not true/false")


# --- constraints: a tiny, safe expression language over the parameters -----------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b}


def _compile_constraint(expr: str, where: str) -> ast.Expression:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise SpaceError(f"{where}: constraint {expr!r} is not an expression ({e.msg})") from None
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
               ast.BinOp, ast.Compare, ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List,
               *_BINOPS, *_CMPOPS)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise SpaceError(f"{where}: constraint {expr!r} uses {type(node).__name__}, not allowed "
                             "(use parameters, numbers, strings, arithmetic, comparisons, and/or/not)")
        if isinstance(node, ast.Name) and node.id not in PARAMETERS and node.id not in ("true", "false"):
            raise SpaceError(f"{where}: constraint {expr!r} names unknown parameter {node.id!r}")
    return tree


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
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
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
    """A finite configuration space: the union of one or more grids, minus what the
    constraints exclude. Configs are enumerated once, in a stable order, without duplicates.

    Args:
        name: the space's name.
        grids: list of mappings parameter -> list of values; parameters absent from a grid
            take the :class:`Config` default.
        constraints: expressions over the parameters (e.g. ``"batch * input_size**2 <= 2**20"``)
            that every config must satisfy.
        description: free text.
        source: where the space came from (file path or ``builtin:NAME``), used in errors.
    """

    def __init__(self, name: str, grids: list[Mapping[str, list[Any]]],
                 constraints: Iterable[str] = (), description: str = "",
                 source: str | None = None) -> None:
        self.name = name
        self.description = description
        self.source = source or name
        self.grids = [dict(g) for g in grids]
        self.constraints = list(constraints)
        self._configs: list[Config] | None = None
        self._validate()

    # validation happens eagerly so that a bad file fails at load, naming file/key/value
    def _validate(self) -> None:
        where = self.source
        if not self.grids:
            raise SpaceError(f"{where}: no [[grid]] table: the space is empty")
        for gi, grid in enumerate(self.grids):
            for key, values in grid.items():
                if key not in PARAMETERS:
                    raise SpaceError(f"{where}: grid {gi + 1}: unknown parameter {key!r} "
                                     f"(known: {', '.join(PARAMETERS)})")
                if not isinstance(values, list):
                    grid[key] = values = [values]
                if not values:
                    raise SpaceError(f"{where}: grid {gi + 1}: {key} has no values: the space is empty")
                for v in values:
                    probe = {key: v}
                    # check the type and domain of each value on its own where possible
                    try:
                        if key in ("family", "block", "precision"):
                            allowed = {"family": FAMILIES, "block": BLOCKS, "precision": PRECISIONS}[key]
                            if v not in allowed:
                                raise SpaceError(f"unknown value {v!r} (expected one of {', '.join(allowed)})")
                        elif key == "early_downsample":
                            _as_bool(key, v)
                        elif key == "width":
                            if not _as_float(key, v) > 0:
                                raise SpaceError(f"{v!r} must be > 0")
                        elif key in ("depth", "input_size", "batch", "classes"):
                            if _as_int(key, v) < 1:
                                raise SpaceError(f"{v!r} must be >= 1")
                    except SpaceError as e:
                        msg = str(e).removeprefix(f"{key}: ")
                        raise SpaceError(f"{where}: grid {gi + 1}: {key} = {probe[key]!r}: {msg}") from None
        self._compiled = [_compile_constraint(c, where) for c in self.constraints]

    @property
    def configs(self) -> list[Config]:
        """All configs, enumerated on first use."""
        if self._configs is None:
            self._configs = self._enumerate()
        return self._configs

    def _enumerate(self) -> list[Config]:
        seen: set[Config] = set()
        out: list[Config] = []
        for gi, grid in enumerate(self.grids):
            keys = list(grid)
            for values in itertools.product(*(grid[k] for k in keys)):
                d = dict(zip(keys, values))
                try:
                    cfg = Config.from_dict(d)
                except SpaceError as e:
                    raise SpaceError(f"{self.source}: grid {gi + 1}: {e}") from None
                if cfg in seen:
                    continue
                env = cfg.to_dict()
                if all(_eval(c, env) for c in self._compiled):
                    seen.add(cfg)
                    out.append(cfg)
        if not out:
            raise SpaceError(f"{self.source}: the space is empty (the constraints exclude every config)")
        return out

    def __len__(self) -> int:
        return len(self.configs)

    def __iter__(self) -> Iterator[Config]:
        return iter(self.configs)

    def __getitem__(self, i: int) -> Config:
        return self.configs[i]

    def __repr__(self) -> str:
        return f"Space({self.name!r}, {len(self)} configs)"

    def to_frame(self, configs: Iterable[Config] | None = None) -> pd.DataFrame:
        """DataFrame with one row per config: ``config_id`` and the parameter columns."""
        cs = self.configs if configs is None else list(configs)
        df = pd.DataFrame([c.to_dict() for c in cs], columns=list(PARAMETERS))
        df.insert(0, "config_id", [c.config_id for c in cs])
        return df

    def values(self) -> dict[str, list[Any]]:
        """Distinct values of each parameter over the space, sorted."""
        out: dict[str, set] = {p: set() for p in PARAMETERS}
        for c in self.configs:
            for k, v in c.to_dict().items():
                out[k].add(v)
        return {k: sorted(v, key=lambda x: (str(type(x)), x)) for k, v in out.items()}

    def sample(self, n: int, seed: int = 0, method: str = "uniform") -> list[Config]:
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

    def _level_matrix(self) -> np.ndarray:
        """Each config as a vector of its parameters' level ranks scaled to [0, 1]."""
        vals = self.values()
        cols = []
        for p in PARAMETERS:
            levels = {v: i for i, v in enumerate(vals[p])}
            k = max(len(levels) - 1, 1)
            cols.append([levels[getattr(c, p)] / k for c in self.configs])
        return np.asarray(cols, dtype=np.float64).T


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
    return sorted(p.name.removesuffix(".toml") for p in resources.files("carb.spaces").iterdir()
                  if p.name.endswith(".toml"))


def from_toml(text: str, source: str, default_name: str) -> Space:
    """Parse a space from TOML text. ``source`` names the file in error messages."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(f"{source}: not valid TOML ({e})") from None
    known = {"name", "description", "grid", "constraints"}
    for key in doc:
        if key not in known:
            raise SpaceError(f"{source}: unknown key {key!r} (expected name, description, grid, constraints)")
    grids = doc.get("grid", [])
    if isinstance(grids, dict):
        grids = [grids]
    constraints = doc.get("constraints", [])
    if isinstance(constraints, str):
        constraints = [constraints]
    return Space(name=doc.get("name", default_name), grids=grids, constraints=constraints,
                 description=doc.get("description", ""), source=source)


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
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpaceError(f"{s}: cannot read ({e})") from None
    return from_toml(text, source=str(path), default_name=path.stem)
