"""What a launch raises when it ends: the error of the rank that failed first, in words.

:class:`Failures` is the part of :class:`.supervisor.Supervisor` that turns
how its processes ended (read from the launch's :class:`.state.LaunchState`)
into :class:`.errors.LaunchError` and its kin.
"""

from __future__ import annotations

from . import errors
from .state import LaunchState

#: What torch prints when a rank's own store cannot take the port the launch's store holds.
HOSTED_STORE_NOTE = "TORCHELASTIC_USE_AGENT_STORE is enabled so ignoring the error"


def worth_showing(output: str) -> str:
    """What the ranks printed, less torch's note that a store a rank hosts itself yields to
    the launch's (which the launch tells every rank is there): its plumbing, not the
    learner's."""
    return "\n".join(line for line in output.rstrip().splitlines() if HOSTED_STORE_NOTE not in line)


class Failures:
    """Errors for a launch that ended.

    Args:
        state: the launch's state, read once the block has ended.
    """

    def __init__(self, state: LaunchState):
        self.state = state

    def early_exits(self) -> list[str]:
        """Ranks that ended cleanly (code 0) without their report, in words."""
        state = self.state
        return errors.early_exits(state.ended, {r["rank"] for r in state.reports}, state.left)

    def raise_for(self, exc_type, exc) -> None:
        """Raise what the launch's end means: a timeout, an interrupt, a rank's error, a gap.

        Returns quietly when the launch went well, or when the block raised
        an error of its own (which then goes on unchanged).

        Args:
            exc_type: the type of what the block raised, or ``None``.
            exc: what the block raised, or ``None``.
        """
        from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

        state = self.state
        early = self.early_exits()
        if state.timed_out:
            ranks = sorted(r["rank"] for r in state.reports)
            message = errors.timeout(
                state.timeout_s, state.started, state.world_size, ranks, early, state.stacks
            )
            raise errors.LaunchTimeout(message, output=state.output) from None
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # (a rank started when the interrupt came is stopped, but was never counted)
            count = max(state.started, state.stopped)
            raise errors.LaunchInterrupted(errors.interrupted(count)) from None
        if isinstance(exc, ProcessRaisedException):
            self._raised(exc, early)
        if isinstance(exc, ProcessExitedException) and state.stopped_early and early:
            raise errors.LaunchError(errors.left_early(early), output=state.output) from None
        if isinstance(exc, ProcessExitedException):
            self._stopped_after_a_raise(exc, early)
            message = errors.exited(exc.error_index, exc.exit_code, exc.signal_name, state.output)
            message = _with(message, errors.still_running(state.stacks, exc.error_index))
            raise errors.LaunchError(message, exc.error_index, output=state.output) from None
        if exc is None:
            self._ended_without_error(early)

    def _raised(self, exc, early: list[str]) -> None:
        """Raise the error of the rank that failed first (torch's ``ProcessRaisedException``)."""
        state = self.state
        trace = str(exc).split("terminated with the following error:", 1)[-1].strip()
        cause = errors.first_cause(
            exc.error_index, errors.last_error_line(trace), state.ended, state.raised_by
        )
        index = exc.error_index
        if cause and cause[2]:  # another rank raised first: that is the error to read
            index, trace = cause[0], cause[2]
        elif cause:  # another rank was killed: it raised nothing
            name = errors.signal_name(cause[1])
            message = errors.exited(cause[0], cause[1], name, state.output)
            message = _with(message, errors.still_running(state.stacks, cause[0]))
            raise errors.LaunchError(message, cause[0], output=state.output) from None
        message = errors.raised(index, trace, early, tuple(state.names))
        message = _with(message, errors.still_running(state.stacks, index))
        raise errors.LaunchError(message, index, trace, state.output) from None

    def _stopped_after_a_raise(self, exc, early: list[str]) -> None:
        """Raise the error of a rank that raised, when torch named one the launch stopped.

        When a rank raises, torch stops the others with SIGTERM (and the launch
        asks them for their stacks first); if it looks at the ranks after that,
        it may name a stopped one first. The rank that raised (its own error,
        not a lost partner's) is the one to read.
        """
        state = self.state
        stopped = {s.name for s in errors.LAUNCH_SIGNALS}
        if exc.signal_name not in stopped or not state.raised_by:
            return
        own = [
            rank for rank, trace in sorted(state.raised_by.items())
            if not errors.PEER_LOST.search(errors.last_error_line(trace))
        ]  # fmt: skip
        index = (own or sorted(state.raised_by))[0]
        trace = state.raised_by[index]
        message = errors.raised(index, trace, early, tuple(state.names))
        message = _with(message, errors.still_running(state.stacks, index))
        raise errors.LaunchError(message, index, trace, state.output) from None

    def _ended_without_error(self, early: list[str]) -> None:
        """Show what the ranks printed; raise if no rank started or one left without its report."""
        state = self.state
        said = worth_showing(state.output)
        if said.strip():
            # Nothing failed: show what the ranks printed, after the fact.
            print("What the ranks printed:\n" + said)
        if state.spawn_calls and state.started == 0 and not state.reports:
            raise errors.LaunchError(
                "no process was started: mp.spawn(..., nprocs=0) returns at once and runs "
                f"nothing. Pass nprocs=world_size (here {state.world_size})."
            )
        if state.expect_reports and state.world_size:
            ranks = {r["rank"] for r in state.reports}
            missing = sorted(set(range(state.world_size)) - ranks)
            if missing:
                said = early or [f"rank {r} ended without sending its report" for r in missing]
                raise errors.LaunchError(errors.left_early(said), output=state.output)


def _with(message: str, more: str) -> str:
    """``message`` with the sentence ``more`` on a line of its own after it, if there is one."""
    return f"{message}\n{more}" if more else message
