"""Reports typed end to end: a probe declares the TypedDict it sends; its check reads that type.

A probe's report crosses a process boundary as a plain dict. The checks read
it as the ``TypedDict`` the probe declares with ``reports.sends``, after
``reports.read_as`` has compared its keys, so a probe and its check cannot
drift apart without a loud error naming the keys.
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
from importlib import import_module
from pathlib import Path
from typing import TypedDict

import pytest

from ddp_lesson import reports
from ddp_lesson.exercises import probes
from ddp_lesson.exercises.checks import base
from ddp_lesson.exercises.probes import stage_workers

CHECKS = Path(base.__file__).parent


class Counted(TypedDict):
    rank: int
    total: float


@reports.sends(Counted)
def counting(rank: int, world_size: int, port: int) -> None:
    """A rank function that declares what it sends (never launched here)."""


def rank_functions() -> list:
    """Every probe function a launch runs in its ranks: its first parameter is ``rank``."""
    found = []
    for module_info in pkgutil.iter_modules(probes.__path__):
        module = import_module(f"{probes.__name__}.{module_info.name}")
        for name, function in vars(module).items():
            if not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            parameters = list(inspect.signature(function).parameters)
            if name[0] != "_" and parameters[:2] == ["rank", "world_size"]:
                found.append(function)
    return found


def test_every_rank_function_of_the_probes_declares_a_report_with_the_rank():
    functions = rank_functions()
    assert len(functions) >= 15  # every probe module's rank functions were found
    undeclared = [f.__qualname__ for f in functions if getattr(f, "sends", None) is None]
    assert undeclared == []
    for function in functions:
        assert "rank" in function.sends.__required_keys__, function.__qualname__


def test_a_report_sent_typed_is_read_back_as_its_type(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "_connected", None)
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path))
    reports.send_typed(Counted(rank=1, total=2.0))
    reports.send_typed(Counted(rank=0, total=1.0))
    assert reports.reports_of(counting, reports.collect(tmp_path)) == [
        {"rank": 0, "total": 1.0},
        {"rank": 1, "total": 2.0},
    ]


def test_a_report_with_other_keys_than_its_type_names_them(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "_connected", None)
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path))
    reports.send_report(0, sum=1.0)
    with pytest.raises(reports.ReportMismatch, match=r"missing \['total'\].*\['sum'\]"):
        reports.reports_of(counting, reports.collect(tmp_path))
    with pytest.raises(TypeError, match="declares no report type"):
        reports.reports_of(lambda rank, world_size, port: None, [])


def test_a_launched_probe_whose_reports_drift_from_its_type_fails_loudly(monkeypatch):
    # report_rank sends a RankReport; read as a Counted, its ranks' reports must be refused
    monkeypatch.setattr(stage_workers.report_rank, "sends", Counted)
    with pytest.raises(reports.ReportMismatch, match="is not a Counted"):
        base.launch_probe(2, stage_workers.report_rank)
    monkeypatch.undo()
    got = base.run_probe(stage_workers.report_rank, 2)
    assert [(r["rank"], r["world_size"]) for r in got] == [(0, 2), (1, 2)]


def test_checks_read_reports_only_through_their_probes_types():
    """No check launches ranks or reads a launch's reports past run_probe and reports_of."""
    found = []
    for path in sorted(CHECKS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("run_ranks", "collect"):
                if path.name != "base.py":
                    found.append(f"{path.name}:{node.lineno} {node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "reports":
                call = next(
                    (
                        c
                        for c in ast.walk(tree)
                        if isinstance(c, ast.Call)
                        and node in c.args
                        and getattr(c.func, "attr", getattr(c.func, "id", "")) == "reports_of"
                    ),
                    None,
                )
                if call is None:
                    found.append(f"{path.name}:{node.lineno} .reports read untyped")
            for arg in _annotated(node):
                if arg in ("dict", "list[dict]", "list[dict] | Result"):
                    found.append(f"{path.name}:{node.lineno} annotated {arg}")
    assert found == []


def _annotated(node: ast.AST) -> list[str]:
    """The annotations a function definition gives its parameters and its result, as text."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    notes = [a.annotation for a in arguments if a.annotation is not None]
    notes += [node.returns] if node.returns is not None else []
    return [ast.unparse(note) for note in notes]
