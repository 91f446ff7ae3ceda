"""What the code says about the model: its device, its DDP wrapper, its forward pass.

A model or tensor put on one fixed GPU in every process, a model that no
``DistributedDataParallel`` wraps (with gradients averaged by hand, where
the code does so), and a training forward pass that calls the unwrapped
module instead of its wrapper.
"""

from __future__ import annotations

import ast

from .read_syntax import Scope, called_name, calls_in, ddp_aliases, training_loops
from .read_terms import Finding, Reading


def _constant_device(expr: ast.expr | None) -> str | None:
    """``"cuda:0"`` for a device that is a constant GPU (0, "cuda:1", torch.device("cuda", 0))."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(
        expr.value, bool
    ):
        return f"cuda:{expr.value}"
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        if expr.value.startswith("cuda:"):
            return expr.value
    if isinstance(expr, ast.Call) and called_name(expr) == "device_for" and expr.args:
        return _constant_device(expr.args[0])  # the course's helper: device_for(0)
    if isinstance(expr, ast.Call) and called_name(expr) == "device" and expr.args:
        parts = [a.value for a in expr.args if isinstance(a, ast.Constant)]
        if len(parts) == len(expr.args):
            text = ":".join(str(p) for p in parts)
            return text if text.startswith("cuda:") else None
    return None


def read_model_part(reading: Reading, tree: ast.Module, functions) -> None:
    wrappers = calls_in(tree, *ddp_aliases(tree))
    optimizers = [
        c
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
        and c.args
        and isinstance(c.args[0], ast.Call)
        and called_name(c.args[0]) == "parameters"
        and isinstance(c.args[0].func, ast.Attribute)
        and isinstance(c.args[0].func.value, ast.Name)
    ]
    model_line = None
    fixed = False
    for owner in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        scope = Scope(owner)
        calls = [n for n in ast.walk(owner) if isinstance(n, ast.Call)]
        for node in sorted(calls, key=lambda n: n.lineno):
            if called_name(node) in ("to", "cuda") and node.args and not fixed:
                given = node.args[0]
                device = _constant_device(scope.resolve(given, node.lineno))
                if device:
                    fixed = True
                    chosen = isinstance(given, ast.Name) and scope.line_of(given.id, node.lineno)
                    reading.findings.append(
                        Finding(
                            "model_wrapping",
                            f"{ast.unparse(node)} puts this on {device} in every process"
                            + (f" ({given.id} is chosen at line {chosen})" if chosen else "")
                            + ": the device must follow the rank (model.to(rank), or "
                            "torch.device('cuda', rank))",
                            chosen or node.lineno,
                        )
                    )
        for opt in optimizers:
            if any(opt is n for n in ast.walk(owner)):
                model = opt.args[0].func.value.id
                model_line = scope.line_of(model, opt.lineno) or opt.lineno
    if model_line is not None:
        reading.lines["model_wrapping"] = model_line
    if wrappers:
        reading.lines["model_wrapping"] = wrappers[0].lineno
        _read_forward(reading, tree, wrappers)
    elif model_line is not None or optimizers:
        by_hand = [c for c in calls_in(tree, "all_reduce") if "grad" in ast.unparse(c)]
        reading.findings.append(
            Finding(
                "model_wrapping",
                f"the model is not wrapped in DistributedDataParallel and the code syncs "
                f"gradients itself (all_reduce at line {by_hand[0].lineno}); by hand, every "
                "rank must also start from the same weights (broadcast rank 0's parameters "
                "first) and average every gradient; DDP(model) does both"
                if by_hand
                else "nothing wraps the model in DistributedDataParallel, so each process "
                "trains its own copy and gradients are never averaged; after moving it to "
                "its device, wrap it: model = DDP(model, ...)",
                model_line,
            )
        )


def _read_forward(reading: Reading, tree: ast.Module, wrappers: list[ast.Call]) -> None:
    """Find forward passes that call the raw module instead of its DDP wrapper."""
    for owner in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(owner):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            if node.value not in wrappers or not node.value.args:
                continue
            raw = node.value.args[0]
            target = node.targets[0]
            if not (isinstance(raw, ast.Name) and isinstance(target, ast.Name)):
                continue
            if raw.id == target.id:
                continue
            for _, loop in training_loops(owner):
                for call in ast.walk(loop):
                    is_raw = isinstance(call, ast.Call) and (
                        (isinstance(call.func, ast.Name) and call.func.id == raw.id)
                        or ast.unparse(call.func) == f"{target.id}.module"
                    )
                    if is_raw:
                        reading.findings.append(
                            Finding(
                                "model_wrapping",
                                f"the forward pass calls the unwrapped module "
                                f"{ast.unparse(call.func)}(...), not the wrapper "
                                f"{target.id}(...); DDP only averages gradients of forward "
                                f"passes that go through it",
                                call.lineno,
                            )
                        )
                        return
