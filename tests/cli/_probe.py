"""The check every bad-input probe makes: one line ``error: ...``, exit code 2 (130 for an interrupt), no
traceback, and nothing left behind in the probe's folder."""

from __future__ import annotations

from tests._helpers import one_line_error


def files_under(d) -> set:
    """The paths under ``d``, relative to it."""
    return {p.relative_to(d) for p in d.rglob("*")}


def probe(cli, paths: dict, args: list[str], words: tuple[str, ...] = (), code: int = 2) -> str:
    """Run ``carb ARGS`` (placeholders such as ``{bundle}`` filled from ``paths``) and check the refusal;
    returns the error line."""
    before = files_under(paths["tmp"])
    rc, _, err = cli(*[a.format(**paths) for a in args])
    if code == 2:
        one_line_error(rc, err, *[w.format(**paths) for w in words])
    else:
        assert rc == code, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert all(w.format(**paths) in lines[0] for w in words), err
    assert "Traceback" not in err
    assert files_under(paths["tmp"]) == before, "a refused command left files behind"
    return err.strip()


def case_id(case) -> str:
    """A short test id from a probe's arguments."""
    args = case[0] if isinstance(case, tuple) else case
    return " ".join(args)[:70]
