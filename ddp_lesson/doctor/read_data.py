"""What the code says about dividing the data among the ranks.

Follows each training loop back to the ``DataLoader`` it iterates and
reads that loader's sampler: none at all (every rank iterates the whole
data set), or a shuffling ``DistributedSampler`` in an epoch loop that
never calls ``set_epoch``. A loader over an ``IterableDataset`` class of the
file takes no sampler (its ``__iter__`` divides the data), so it gets no
sampler hint.
"""

from __future__ import annotations

import ast

from .read_syntax import Scope, called_name, calls_in, keyword_arg, training_loops
from .read_terms import Finding, Reading


def _loop_source(loop: ast.For) -> ast.expr:
    """What a for loop iterates, seen through enumerate(...), tqdm(...) and friends."""
    it = loop.iter
    wrappers = ("enumerate", "tqdm", "zip", "iter")
    while isinstance(it, ast.Call) and called_name(it) in wrappers and it.args:
        it = it.args[0]
    return it


def _loader_call(expr: ast.expr, owner: ast.AST, tree: ast.AST, functions) -> ast.Call | None:
    """The ``DataLoader(...)`` call behind a loop's iterable, when the code shows it."""
    value = Scope(owner).resolve(expr)
    if isinstance(value, ast.Attribute):  # self.train_loader and the like
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                ast.dump(t) == ast.dump(value) for t in node.targets
            ):
                value = node.value
    if isinstance(value, ast.Call) and called_name(value) == "DataLoader":
        return value
    if isinstance(value, ast.Call) and called_name(value) in functions:
        loaders = calls_in(functions[called_name(value)], "DataLoader")
        return loaders[-1] if loaders else None
    return None


def _shuffles(sampler: ast.expr | None) -> bool:
    """False when the code builds the sampler with ``shuffle=False`` (its order never changes)."""
    if not isinstance(sampler, ast.Call):
        return True
    shuffle = keyword_arg(sampler, "shuffle")
    return not (isinstance(shuffle, ast.Constant) and shuffle.value is False)


def _iterable_dataset(loader: ast.Call, scope: Scope, tree: ast.AST) -> bool:
    """True when the loader's data set is made by a class of the file based on IterableDataset."""
    dataset = scope.resolve(keyword_arg(loader, "dataset", 0), loader.lineno)
    if not isinstance(dataset, ast.Call):
        return False
    name = called_name(dataset)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                     for b in node.bases]  # fmt: skip
            return "IterableDataset" in bases
    return False


def _samplers_never_given(tree: ast.Module) -> list[ast.Call]:
    """DistributedSampler(...) calls assigned to a name no DataLoader is given as sampler=."""
    given = {
        ast.unparse(keyword_arg(c, "sampler"))
        for c in calls_in(tree, "DataLoader")
        if keyword_arg(c, "sampler") is not None
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and called_name(node.value) == "DistributedSampler"
        and not any(ast.unparse(t) in given for t in node.targets)
    ]


def _sampler_for(loader: ast.Call) -> str:
    """The ``sampler=`` a ``DataLoader(...)`` call lacks, over the data set it is given.

    >>> _sampler_for(ast.parse("DataLoader(train_set, batch_size=8)").body[0].value)
    'sampler=DistributedSampler(train_set)'
    >>> _sampler_for(ast.parse("DataLoader(TensorDataset(x, y))").body[0].value)
    'sampler=DistributedSampler(...) over the data set it is given'
    """
    given = loader.args[0] if loader.args else keyword_arg(loader, "dataset")
    if isinstance(given, ast.Name):
        return f"sampler=DistributedSampler({given.id})"
    return "sampler=DistributedSampler(...) over the data set it is given"


def _group_in_dataset(tree: ast.Module) -> int | None:
    """The line where a class that streams (defines ``__iter__``) asks the process group
    which rank this is (``dist.get_rank()``, ``get_world_size()``, ``is_initialized()``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(f, ast.FunctionDef) and f.name == "__iter__" for f in node.body
        ):
            asks = calls_in(node, "get_rank", "get_world_size", "is_initialized")
            if asks:
                return min(call.lineno for call in asks)
    return None


def _ddp_loops_first(loops: list) -> list:
    """The training loops, those in a function that wraps a model in DDP first: a loop that
    trains a model alone beforehand (a pretraining step) is not the one DDP needs divided."""
    wraps = [(o, lp) for o, lp in loops if calls_in(o, "DistributedDataParallel", "DDP")]
    return wraps + [pair for pair in loops if pair not in wraps]


def read_data_part(reading: Reading, tree: ast.Module, functions) -> None:
    reading.group_in_dataset = _group_in_dataset(tree)
    loaders = calls_in(tree, "DataLoader")
    if loaders:
        reading.lines["data_division"] = loaders[0].lineno
    for owner, loop in _ddp_loops_first(training_loops(tree)):
        loader = _loader_call(_loop_source(loop), owner, tree, functions)
        if loader is None:
            continue
        reading.lines["data_division"] = loader.lineno
        sampler = keyword_arg(loader, "sampler")
        scope = Scope(owner)
        sampler = scope.resolve(sampler, loader.lineno)
        if _iterable_dataset(loader, scope, tree):
            return
        if sampler is None or (isinstance(sampler, ast.Constant) and sampler.value is None):
            made = _samplers_never_given(tree)
            reading.findings.append(
                Finding(
                    "data_division",
                    "the training DataLoader has no sampler=, so every process iterates "
                    + (
                        f"the whole data set; the DistributedSampler made at line "
                        f"{made[0].lineno} is never given to it (pass it as sampler=...)"
                        if made
                        else f"the whole data set; add {_sampler_for(loader)}"
                    ),
                    loader.lineno,
                )
            )
            return
        distributed = isinstance(sampler, ast.Call) and called_name(sampler) == "DistributedSampler"
        epochs = [
            n
            for n in ast.walk(owner)
            if isinstance(n, ast.For) and n is not loop and loop in list(ast.walk(n))
        ]
        if distributed and _shuffles(sampler) and epochs and not calls_in(tree, "set_epoch"):
            reading.findings.append(
                Finding(
                    "data_division",
                    "the epoch loop never calls set_epoch, so DistributedSampler shuffles "
                    "with the same seed every epoch and every epoch repeats one order; call "
                    "train_loader.sampler.set_epoch(epoch) at the top of the loop",
                    epochs[-1].lineno,
                    needs="epochs",
                )
            )
        return
