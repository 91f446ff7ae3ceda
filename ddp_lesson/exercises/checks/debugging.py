"""Check for the exercise of ``14_debugging``: the parameters a backward leaves without a gradient.

A failure shows what the answer returned and asks where to look; the
names DDP's error gives are never shown before a pass, and the line that
fixes it only after a few tries at the same mistake, or with ``reveal=True``.
"""

from __future__ import annotations

from collections.abc import Callable

from ... import devices
from ...stages import stage
from ..probes import practice as probes
from . import base
from .base import Result, failed, graded, not_attempted, passed, quote

MODEL = stage("model_wrapping").title


# -- 14, exercise 1: parameters without a gradient -----------------------------------------
@graded
def _nothing_named(name: str) -> Result:
    """The failure when DDP's own run named no parameter: the check cannot judge."""
    import torch

    return failed(
        name,
        stage=MODEL,
        expected="DDP's own run to name the parameters that got no gradient",
        happened="DDP's error named none: this version of torch words it in a way the check "
        f"does not read (torch {torch.__version__})",
        fix="this is the check's own run, not your answer: tell the course's maintainers",
    )


def check_unused(params_without_grad: Callable, *, reveal: bool = False) -> Result:
    """Check ``params_without_grad(model, loss)`` names what DDP's own error names.

    The learner's function runs here, on a plain ``Branchy`` network (a head
    the loss ignores, a frozen layer), twice: once with the loss of its first
    output, once with the loss of its second, so that the names to find
    change. The same networks then train under DDP on real ranks until DDP
    fails, with its debug level at INFO, and the parameters its errors name
    are what each answer is compared with. Names are compared, as
    ``model.named_parameters()`` gives them: an answer of positions (DDP's
    error also lists indices) or of the parameters themselves is told so.
    A failure shows what the answer returned, never the names expected.
    ``reveal=True`` shows the line that fixes a failure now.
    """
    name = "check_unused"
    import torch

    given = []
    for head in probes.HEADS:
        torch.manual_seed(0)
        model = probes.Branchy()
        try:
            answer = params_without_grad(model, probes.branchy_loss(model, head=head))
        except NotImplementedError:
            return not_attempted(name, "params_without_grad()")
        except Exception as error:  # learner code
            return failed(
                name,
                stage=MODEL,
                expected="params_without_grad() to run",
                happened=quote(error),
                fix="params_without_grad: the line the error names (p.grad is None for a "
                "parameter that got no gradient)",
            )
        if base.is_stub(answer):
            return not_attempted(name, "params_without_grad()")
        given.append((model, answer))
    got, error = base.launch_probe(devices.plan().world_size, probes.ddp_unused)
    if error is not None:
        return failed(
            name,
            stage=MODEL,
            expected="DDP's own run to report its unused parameters",
            happened=quote(error),
            fix="this is the check's own run: re-run the cell",
        )
    named = got[0]["named"]
    if not all(named):  # nothing to compare with: an empty answer must not pass for it
        return _nothing_named(name)
    for k, (model, answer) in enumerate(given):
        wrong = _names_wrong(model, answer, named[k], k, [a for _, a in given[:k]])
        if wrong is not None:
            return wrong
    wrong = _stale_gradients_wrong(params_without_grad, named[0])
    if wrong is not None:
        return wrong
    return passed(name, f"{named[0]}: exactly the parameters DDP's error names.")


def _stale_gradients_wrong(params_without_grad: Callable, named: list[str]) -> Result | None:
    """check_unused's failure when gradients left by an earlier backward change the answer.

    The model has taken a backward through both outputs first (a training
    step before), so every trainable parameter holds a gradient; the loss of
    the first output must still give the names it gave on a fresh model.
    """
    import torch

    torch.manual_seed(0)
    model = probes.Branchy()
    for head in probes.HEADS:
        probes.branchy_loss(model, seed=1, head=head).backward()
    try:
        yours = sorted(str(n) for n in params_without_grad(model, probes.branchy_loss(model)))
    except Exception:  # (a failure of its own was judged on the fresh models)
        return None
    if yours == named:
        return None
    return failed(
        "check_unused",
        stage=MODEL,
        expected="the same names for the loss of the first output, whatever gradients the "
        "model held before",
        happened=f"on a fresh model params_without_grad named the right parameters; on one "
        f"that still held gradients from an earlier backward it returned {yours}",
        fix="params_without_grad: a parameter keeps its .grad from an earlier backward until "
        "something clears it; does your function see only what this loss.backward() gives?",
        answer="model.zero_grad(set_to_none=True) before loss.backward()",
    )


#: How a failure of check_unused names each of its runs.
RUNS = ("the loss of the first output", "the loss of the second output (a second run)")


#: The line that fixes a wrong answer of check_unused, kept back as its failures' answer.
FIXING_LINE = (
    "[name for name, p in model.named_parameters() "
    "if p.requires_grad and p.grad is None], after loss.backward()"
)


def _names_wrong(model, answer: object, named: list[str], run: int, earlier: list) -> Result | None:
    """check_unused's failure for ``answer`` on run ``run``, or None when it names ``named``.

    Args:
        model: the ``Branchy`` the answer was given. named: what DDP's error named.
        earlier: the answers of the runs before this one.
    """
    where = f"with {RUNS[run]}"
    try:
        given = list(answer)
    except TypeError:
        given = None
    wrong = _not_names(answer, given, where)
    if wrong is not None:
        return wrong
    yours = sorted(str(n) for n in given)
    if yours == named:
        return None
    positions = _positions(given)
    if positions is not None:
        return _positions_given(model, positions, named, where)
    return failed(
        "check_unused",
        stage=MODEL,
        expected="the parameters DDP's error names, for the model and loss given",
        happened=f"{where}, params_without_grad returned {yours}: "
            f"{_why_other_names(model, yours, earlier)}",
        fix="params_without_grad: after loss.backward(), what tells a parameter the loss did "
        "not reach from one it did, and which parameters does DDP leave out of its count?",
        answer=FIXING_LINE,
    )


def _not_names(answer: object, given: list | None, where: str) -> Result | None:
    """check_unused's failure when the answer is no list of names at all, or None."""
    import torch

    name = "check_unused"
    if given is None or isinstance(answer, (str, bytes)):
        return failed(
            name,
            stage=MODEL,
            expected="a list of parameter names",
            happened=f"{where}: {repr(answer)[:200]}",
            fix="return the names from model.named_parameters()",
        )
    if given and all(isinstance(n, torch.Tensor) for n in given):
        return failed(
            name,
            stage=MODEL,
            expected="names, as model.named_parameters() gives them (the check compares names)",
            happened=f"{where}: {len(given)} tensor(s), the parameters themselves, not their names",
            fix="params_without_grad's return: model.named_parameters() gives each parameter "
            "with its name; return the names",
        )
    return None


def _positions_given(model, positions: list[int], named: list[str], where: str) -> Result:
    """check_unused's failure for an answer of positions, saying whether they are the right ones."""
    everything = [n for n, _ in model.named_parameters()]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    why = (
        "positions, not names: the check compares names, as model.named_parameters() "
        "gives them (DDP's error lists the names beside the indices)"
    )
    for order, among in ((trainable, "the parameters that train, as DDP numbers them"),
                         (everything, "model.named_parameters()")):  # fmt: skip
        if all(i < len(order) for i in positions) and (
            sorted(order[i] for i in positions) == named
        ):
            why += f" (they are the right parameters, counted in {among})"
            break
    return failed(
        "check_unused",
        stage=MODEL,
        expected="names (the check compares names)",
        happened=f"{where}: {positions}: {why}",
        fix="params_without_grad's return: keep each parameter's name, not its position",
        answer=FIXING_LINE,
    )


def _why_other_names(model, yours: list[str], earlier: list) -> str:
    """Why names other than DDP's were returned, as far as the model and earlier runs tell."""
    everything = [n for n, _ in model.named_parameters()]
    frozen = sorted(n for n, p in model.named_parameters() if not p.requires_grad)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if any(sorted(str(n) for n in other) == yours for other in earlier):
        return (
            "the same names as in the first run, although this loss leaves another output "
            "out: does the answer look at the model and the loss it is given?"
        )
    if not yours:
        return (
            "no names at all, though DDP's error names parameters for this loss: after "
            "loss.backward(), what marks a parameter the loss did not use?"
        )
    if yours == sorted(trainable):
        return "every trainable parameter: was loss.backward() called before looking?"
    if set(frozen) & set(yours):
        extra = sorted(set(frozen) & set(yours))
        return f"{extra} never train (requires_grad=False), and DDP skips them"
    if not set(yours) & set(everything):
        return (
            "none of these is a parameter's name: the check compares names, as "
            "model.named_parameters() gives them"
        )
    return "DDP's error names other parameters than these (the check compares names)"


def _positions(given: list) -> list[int] | None:
    """The answer as whole numbers, if it is positions (ints, or strings of digits), else None."""
    if not given:
        return None
    if all(isinstance(i, int) and not isinstance(i, bool) for i in given):
        return [int(i) for i in given]
    if all(isinstance(i, str) and i.strip().isdigit() for i in given):
        return [int(i) for i in given]
    return None
