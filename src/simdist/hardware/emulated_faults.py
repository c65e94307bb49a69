"""What every emulated robot (`simdist emulate`) shares for fault injection (`simdist bench faults`): the fault
schedule, timed from the first command the robot received, and the tally of unsafe commands checked at the robot.

Each emulator says what its faults do (`state_gap`: no state for the duration; `vanish`: the robot's network
endpoints gone for the duration, then back) and what it checks against its own limits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from simdist.errors import ConfigError

FAULT_KINDS = ("state_gap", "vanish")


@dataclass(frozen=True)
class Fault:
    """`kind` from `start_s` (after the first command arrived) for `duration_s`."""

    kind: str
    start_s: float
    duration_s: float

    @classmethod
    def parse(cls, text: str) -> Fault:
        """`KIND:START:DURATION`, e.g. `state_gap:3:1`; a bad one is one ValueError line."""
        parts = text.split(":")
        try:
            kind, start, duration = parts[0], float(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            raise ValueError(
                f"fault '{text}': expected KIND:START_S:DURATION_S, e.g. state_gap:3:1"
            ) from None
        if kind not in FAULT_KINDS or len(parts) != 3 or start < 0 or duration <= 0:
            raise ValueError(
                f"fault '{text}': kind one of {', '.join(FAULT_KINDS)}, start >= 0, duration > 0"
            )
        return cls(kind, start, duration)

    def active(self, t: float | None) -> bool:
        return t is not None and self.start_s <= t < self.start_s + self.duration_s


def parse_faults(texts: list[str] | tuple[str, ...]) -> list[Fault]:
    """`--fault` values as Faults; a bad one is a ConfigError (one line, exit 2)."""
    try:
        return [Fault.parse(text) for text in texts]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class FaultSchedule:
    """The faults of one emulated robot, on a clock that starts at its first command (`begin`)."""

    def __init__(self, faults: list[Fault] | None = None) -> None:
        self.faults = list(faults or [])
        self.first_command: float | None = None  # monotonic time of the first command

    def begin(self, now: float | None = None) -> None:
        """The robot received a command (the clock starts at the first one)."""
        if self.first_command is None:
            self.first_command = time.monotonic() if now is None else now

    def time(self, now: float | None = None) -> float | None:
        """Seconds since the first command (None before it)."""
        if self.first_command is None:
            return None
        return (time.monotonic() if now is None else now) - self.first_command

    def active(self, kind: str) -> Fault | None:
        t = self.time()
        return next((f for f in self.faults if f.kind == kind and f.active(t)), None)


class UnsafeTally:
    """Commands that broke the robot's limits, counted at the robot, with the first few reasons."""

    def __init__(self, keep: int = 5) -> None:
        self.unsafe = 0
        self.reasons: list[str] = []
        self.keep = keep

    def record(self, problems: list[str], t: float | None) -> bool:
        """True when `problems` is empty (the command was safe)."""
        if problems:
            self.unsafe += 1
            if len(self.reasons) < self.keep:
                self.reasons.append(f"at {t or 0.0:.2f} s: " + "; ".join(problems))
        return not problems
