"""The one escalation every path to a robot shares (`simdist deploy`'s loop, the ROS robot node): when good commands
stop, hold; when they have not come back `stop_after_s` after the last one, stop safely, once and for good.

A "good" command is one the robot executes: a fresh or late plan step in the deploy loop, a planner message in the
robot node. The watchdog is armed by the first one, so a robot that never moved is never stopped; after a hold, a
good command resumes. What the stages do (the hold, the Go2's damping or the UR5e's servoStop) is the caller's, in
`simdist.runtime.actuation`; the watchdog only says when.
"""

from __future__ import annotations

HOLD = "hold"
SAFE_STOP = "safe_stop"
# not a stage: good commands came back during a hold (the callers record it beside the stages)
RESUME = "resume"


class Watchdog:
    """Args:
    hold_after_s: hold once no good command came for this long (0: at the first check without one).
    stop_after_s: stop safely once none came for this long, counted from the last good one like the hold; None:
        never (simulation).
    """

    def __init__(self, hold_after_s: float, stop_after_s: float | None) -> None:
        if hold_after_s < 0:
            raise ValueError(f"hold_after_s must be >= 0, got {hold_after_s}")
        if stop_after_s is not None and stop_after_s < hold_after_s:
            raise ValueError(f"stop_after_s ({stop_after_s}) must be at least hold_after_s ({hold_after_s})")
        self.hold_after_s = hold_after_s
        self.stop_after_s = stop_after_s
        self.stage: str | None = None  # None (commands flowing, or not armed yet), HOLD or SAFE_STOP
        self._last_good: float | None = None

    @property
    def armed(self) -> bool:
        return self._last_good is not None

    @property
    def stopped(self) -> bool:
        return self.stage == SAFE_STOP

    def good(self, now: float) -> float | None:
        """A command the robot executes, at `now`. Returns the outage's length (seconds since the good command before
        it) when it ends a hold (commands are back), else None. After a safe stop nothing resumes: the caller refuses
        commands."""
        if self.stage == SAFE_STOP:
            return None
        outage = self.age(now) if self.stage == HOLD else None
        self._last_good = now
        self.stage = None
        return outage

    def age(self, now: float) -> float:
        """Seconds since the last good command (0 before the first)."""
        return 0.0 if self._last_good is None else now - self._last_good

    def check(self, now: float) -> str | None:
        """The stage entered at `now` (HOLD or SAFE_STOP), if any; each is entered once per outage."""
        if self._last_good is None or self.stage == SAFE_STOP:
            return None
        age = now - self._last_good
        # a small tolerance so that an age of exactly the limit (lockstep clocks in whole periods) escalates
        if self.stop_after_s is not None and age + 1e-9 >= self.stop_after_s and age > self.hold_after_s:
            self.stage = SAFE_STOP
            return SAFE_STOP
        if self.stage is None and age > self.hold_after_s:
            self.stage = HOLD
            return HOLD
        return None
