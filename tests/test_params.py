"""Parameter rules declared once next to each public function (carb.params), the same from Python and the CLI."""

from __future__ import annotations

import math

import pytest

from carb.params import Interval, InvalidParameterError, Options, check_param, validate_params


@pytest.mark.parametrize(
    "rule,good,bad",
    [
        (Interval(int, 1, None), [1, 7], [0, -1, 1.5, True, "3", None]),
        (Interval(float, 0.1, 10), [0.1, 10, 3], [0.0, 10.5, math.nan, math.inf, False]),
        (Interval(float, 0, 1, closed="neither"), [0.5], [0.0, 1.0]),
        (Options({"log", "nnls"}), ["log"], ["LOG", 1, None]),
    ],
)
def test_each_rule_accepts_what_it_says_and_nothing_else(rule, good, bad) -> None:
    for v in good:
        check_param("p", v, [rule])
    for v in bad:
        with pytest.raises(InvalidParameterError) as e:
            check_param("p", v, [rule])
        assert e.value.param == "p" and str(e.value).startswith("p: must be ")


def test_a_declared_function_is_checked_and_keeps_its_rules() -> None:
    @validate_params({"k": [Interval(int, 2, None)], "how": [None, Options({"a", "b"})]})
    def f(k: int = 2, how: str | None = None) -> int:
        return k

    assert f(3) == 3 and f(k=4, how="a") == 4
    with pytest.raises(InvalidParameterError, match=r"k: must be an integer >= 2; got 1"):
        f(1)
    with pytest.raises(InvalidParameterError, match="how: must be None or one of a, b"):
        f(2, "c")
    assert set(f._parameter_constraints) == {"k", "how"}


def test_a_rule_for_a_parameter_the_function_lacks_is_a_declaration_error() -> None:
    with pytest.raises(TypeError, match="does not have"):

        @validate_params({"nope": [int]})
        def g(k: int) -> int:
            return k


def test_the_cli_says_a_library_rule_under_its_flag(cli, tmp_path) -> None:
    """The same rule, the same words: Python's parameter name becomes the command's flag."""
    from carb.transfer.here import calibrate_here

    with pytest.raises(InvalidParameterError, match="rounds: must be an integer >= 1"):
        calibrate_here("layers-cpu-avx2-1t", rounds=0)
    # typer's own min=1 answers first on the command line; a rule only the library holds:
    from carb.cli import flag_of

    assert flag_of("max_time_s") == "--max-time" and flag_of("rounds") == "--rounds"
