"""What a launch raises when it ends: the error of the rank that failed first, in words.

:class:`Failures` is the part of :class:`.supervisor.Supervisor` that turns
how its processes ended into :class:`.errors.LaunchError` and its kin.
"""

from __future__ import annotations

from . import errors


class Failures:
    """Errors for a launch that ended (mixed into :class:`.supervisor.Supervisor`)."""

    def _early_exits(self) -> list[str]:
        """Ranks that ended cleanly (code 0) without their report, in words."""
        return errors.early_exits(self._ended, {r["rank"] for r in self.reports}, self._left)

    def _raise(self, exc_type, exc) -> None:
        from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

        ranks = sorted(r["rank"] for r in self.reports)
        early = self._early_exits()
        if self.timed_out:
            message = errors.timeout(
                self.timeout_s, self.started, self.world_size, ranks, early, self._stacks
            )
            raise errors.LaunchTimeout(message, output=self.output) from None
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # (a rank started when the interrupt came is stopped, but was never counted)
            count = max(self.started, self.stopped)
            raise errors.LaunchInterrupted(errors.interrupted(count)) from None
        if isinstance(exc, ProcessRaisedException):
            trace = str(exc).split("terminated with the following error:", 1)[-1].strip()
            cause = errors.first_cause(
                exc.error_index, errors.last_error_line(trace), self._ended, self._raised_by
            )
            index = exc.error_index
            if cause and cause[2]:  # another rank raised first: that is the error to read
                index, trace = cause[0], cause[2]
            elif cause:  # another rank was killed: it raised nothing
                name = errors.signal_name(cause[1])
                message = errors.exited(cause[0], cause[1], name, self.output)
                message = _with(message, errors.still_running(self._stacks, cause[0]))
                raise errors.LaunchError(message, cause[0], output=self.output) from None
            message = errors.raised(index, trace, early, tuple(self._names))
            message = _with(message, errors.still_running(self._stacks, index))
            raise errors.LaunchError(message, index, trace, self.output) from None
        if isinstance(exc, ProcessExitedException) and self._stopped_early and early:
            raise errors.LaunchError(errors.left_early(early), output=self.output) from None
        if isinstance(exc, ProcessExitedException):
            message = errors.exited(exc.error_index, exc.exit_code, exc.signal_name, self.output)
            message = _with(message, errors.still_running(self._stacks, exc.error_index))
            raise errors.LaunchError(message, exc.error_index, output=self.output) from None
        if exc is not None:
            return
        if self.output.strip():
            # Nothing failed: show what the ranks printed, after the fact.
            print("What the ranks printed:\n" + self.output.rstrip())
        if self._spawn_calls and self.started == 0 and not self.reports:
            raise errors.LaunchError(
                "no process was started: mp.spawn(..., nprocs=0) returns at once and runs "
                f"nothing. Pass nprocs=world_size (here {self.world_size})."
            )
        if self.expect_reports and self.world_size:
            missing = sorted(set(range(self.world_size)) - set(ranks))
            if missing:
                said = early or [f"rank {r} ended without sending its report" for r in missing]
                raise errors.LaunchError(errors.left_early(said), output=self.output)


def _with(message: str, more: str) -> str:
    """``message`` with the sentence ``more`` on a line of its own after it, if there is one."""
    return f"{message}\n{more}" if more else message
