"""Checks for ``10_performance``'s exercises: predict a measured quantity, then measure it.

Each check measures the quantity for real on this machine and compares the
learner's prediction with the measurement, within a stated tolerance. A
wrong prediction is told in which direction it is off and why; the
measured value is shown after a few tries, or with ``reveal=True``.
"""

from __future__ import annotations

from ... import bench, devices, launch
from ...stages import stage
from ..probes import performance as probes
from . import answers, base
from .base import Result, failed, is_stub, not_attempted, passed, quote

MODEL = stage("model_wrapping").title

#: How far (as a fraction) a prediction of the bytes exchanged may be from the measurement.
BYTES_TOLERANCE = 0.05

#: A prediction of a time ratio passes within this factor of the measurement.
RATIO_FACTOR = 3.0

#: The two all-reduce sizes compared, in bytes: 4 KB and 64 KB.
SMALL, LARGE = 4 * 2**10, 64 * 2**10

MB = 2**20

#: All-reduces timed of each size, in each of ``LAUNCHES`` launches.
REPEATS, LAUNCHES = 20, 2


def _number(name: str, value: object) -> float | Result:
    if is_stub(value):
        return not_attempted(name, "the prediction line")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return failed(
            name,
            stage=MODEL,
            expected="a positive number",
            happened=repr(value),
            fix="write the prediction as a number",
        )
    return float(value)


def _measured(name: str, value: object, what: str, measure) -> tuple[float, object] | Result:
    """The prediction as a number and ``measure(world_size)``, or the Result that ends the check."""
    predicted = _number(name, value)
    if isinstance(predicted, Result):
        return predicted
    try:
        return predicted, measure(devices.plan().world_size)
    except launch.LaunchError as error:
        return failed(
            name, stage=MODEL, expected=what, happened=quote(error), fix="run the check again"
        )


def _verdict(
    name: str, right: bool, note: str, why, shown: str, expected: str, said: str, reveal: bool
) -> Result:
    """Pass with ``note``, or fail saying ``why()``; the measurement ``shown`` once revealed."""
    if right:
        answers.forget(name)
        return passed(name, note)
    tries = answers.tried(name)
    shown_now = reveal or tries >= answers.REVEAL_AFTER
    return failed(
        name, stage=MODEL, expected=shown if shown_now else expected, happened=said, fix=why()
    )


def check_exchange_prediction(megabytes: object, *, batch: int = 4096, reveal: bool = False):
    """Compare a predicted all-reduce volume per step (MB per rank) with one measured in DDP.

    Args:
        megabytes: the prediction, in MB of 2**20 bytes, as the notebook prints them.
        batch: the global batch of the measured step.
        reveal: show the measurement now, even on a first wrong try.
    """
    name = "check_exchange_prediction"
    found = _measured(
        name, megabytes, "a measured DDP step",
        lambda world_size: base.run_probe(probes.exchange, world_size, batch, 2),
    )  # fmt: skip
    if isinstance(found, Result):
        return found
    predicted, got = found
    world_size = devices.plan().world_size
    measured = got[0]["bytes"] / MB

    def why() -> str:
        if predicted > measured:
            return (
                "too high: the all-reduce carries the gradients, one number per parameter of "
                "the model; does the batch change how many parameters there are?"
            )
        if abs(predicted * world_size / measured - 1) <= BYTES_TOLERANCE:
            return (
                f"too low, by the world size: each rank hands the whole gradient to the "
                f"all-reduce, not 1/{world_size} of it"
            )
        return (
            "too low: count NeuralNetwork's parameters (64 -> 512 -> 512 -> 10, weights and "
            "biases), 4 bytes each"
        )

    return _verdict(
        name,
        abs(predicted / measured - 1) <= BYTES_TOLERANCE,
        f"each rank handed DDP's all-reduce {measured:.2f} MB per step at a global batch "
        f"of {batch}, in {got[0]['calls']} call(s) (DDP's buckets): one 4-byte gradient per "
        "parameter, whatever the batch.",
        why,
        shown=f"{measured:.2f} MB per rank per step ({got[0]['bytes']} bytes)",
        expected=f"within {BYTES_TOLERANCE:.0%} of the measured MB per step",
        said=f"{predicted:g} MB",
        reveal=reveal,
    )


def check_allreduce_prediction(times: object, *, reveal: bool = False) -> Result:
    """Compare a predicted time ratio, all-reduce of 64 KB over one of 4 KB, with a measurement.

    Args:
        times: how many times as long the 64 KB all-reduce takes (16 times the data).
        reveal: show the measurement now, even on a first wrong try.
    """
    name = "check_allreduce_prediction"
    # The fastest call of each size, over two launches: what an all-reduce costs
    # when nothing else on the machine gets in its way (a median moves with the
    # machine's load, and so would the ratio).
    found = _measured(
        name, times, "a measured all-reduce",
        lambda world_size: [
            bench.allreduce([SMALL, LARGE], world_size=world_size, repeats=REPEATS)
            for _ in range(LAUNCHES)
        ],
    )  # fmt: skip
    if isinstance(found, Result):
        return found
    predicted, runs = found
    small, large = (min(rows[i]["min_ms"] for rows in runs) for i in (0, 1))
    measured = large / small
    within = 1 / RATIO_FACTOR <= predicted / measured <= RATIO_FACTOR
    said = (
        f"4 KB took {small:.2f} ms and 64 KB {large:.2f} ms (the fastest of "
        f"{LAUNCHES * REPEATS} calls each): "
        f"{measured:.1f} times as long"
    )
    return _verdict(
        name,
        within,
        f"{said}; you said {predicted:g}. Sixteen times the data, nowhere near sixteen "
        "times the time: a small all-reduce pays mostly for the round trip.",
        lambda: (
            "too high: is the time of a small all-reduce spent moving its bytes, or getting "
            "a message to the other process and back?"
            if predicted > measured
            else "too low: more data never takes less time; what does the extra data cost?"
        ),
        shown=said,
        expected=f"within a factor of {RATIO_FACTOR:g} of the measured ratio",
        said=f"{predicted:g} times",
        reveal=reveal,
    )
