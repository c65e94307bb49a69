"""The deploy loop: read the robot, plan through the world model, act, log; at a fixed control rate.

Each tick: swap in a newly validated model (tick boundary), close or open episodes, read and ingest the state,
push it into the observation history, get a plan, send its action through the actuator, and append the tick to
the bag. Lockstep (simulation) computes every plan in full before the robot moves, so a run is deterministic.
Real time gives the planner a deadline (`deadline_fraction` of the period): a plan that misses it is adopted when
it arrives, and meanwhile each tick executes the next step of the last plan; whole periods the loop itself overran
are counted as missed. Planning ahead (the planner config's `plan_ahead`), the plan from tick k's state is computed
after tick k has acted, with that action as its fixed first step, and tick k+1 executes its step 1: a plan has the
period between two ticks, and a tick waits for nothing but a plan that is late. Any exception in a tick sends the
safe hold and is logged; the loop carries on.
In real time, `scheduling` (simdist.runtime.realtime) puts the control thread and the planner thread under
SCHED_FIFO, the planner one level below, so another process on the computer cannot delay a tick.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from simdist.bags import schema
from simdist.bags.writer import BagWriter
from simdist.errors import ConfigError
from simdist.plan.config import PROCESS_WIDE, ActionLimits, PlannerConfig
from simdist.plan.mppi import Plan, Planner
from simdist.runtime.actuation import Actuator, safe_stop
from simdist.runtime.history import ObservationHistory
from simdist.runtime.ingest import CameraIngest, ProprioIngest
from simdist.runtime.loop_stats import LoopStats
from simdist.runtime.plan_thread import PlanJob, PlanThread
from simdist.runtime.realtime import (
    Scheduling,
    ThreadState,
    apply_to_this_thread,
    freeze_heap,
    lock_memory,
    restore_thread,
    thread_state,
)
from simdist.runtime.store import ModelStore
from simdist.runtime.watchdog import HOLD, RESUME, SAFE_STOP, Watchdog

log = logging.getLogger(__name__)
# real time: how long the safe stop is repeated until the robot is heard from after it
SAFE_STOP_CONFIRM_S = 3.0
# A late or failed plan is stood in for by the last plan's later steps for at most this long, then the robot holds
# (and the watchdog counts): a whole Go2 horizon (25 ticks at 50 Hz), but 5 of the UR5e's 25 (2.5 s at 10 Hz), so a
# dead planner never leaves an arm following a stale plan open loop for seconds.
OPEN_LOOP_S = 0.5


class DeployLoop:
    """One robot, one model store, one planner.

    Args:
        robot: a `Robot`; a SimRobot also reports episode ends (`take_episode_end`) and its simulated clock.
        robot_kind: the task's robot (`simdist.robots` name): its proprio layout and what a hold is.
        actuator: turns the task action into robot commands (`simdist.runtime.actuation`).
        store: the model store (hot swap); its current model plans.
        planner_config, limits: the MPPI settings (horizon = the model's) and the task's action limits.
        adapted_planner_config: the search granted once the dynamics in force were trained on real data (the
            store's `adapted`: a version the gate published after the pretrained one, or a full finetune's model),
            from the tick that swaps such a version in (a rollback to the pretrained one takes it back); None:
            `planner_config` always.
        command: the task command now (the SimRobot's, or a fixed one on hardware).
        bag: the run's BagWriter (already open), or None.
        camera: frames to log (and to give a model with a camera branch).
        realtime: wall-clock control rate (else lockstep).
        episode_steps: hardware only: ticks per logged episode (a SimRobot ends episodes itself).
        scheduling: real time only: SCHED_FIFO priority, CPUs and memory locking of the control thread (the
            thread that calls `tick`) and of the planner thread (one priority level below).
        safe_stop_after_s: escalate a hold that lasted this long (no usable plan, stale state, the safety filter
            holding, errors) to a safe stop: the robot's damping mode where it has one (Go2), else its hold (the
            UR5e's servoStop). A safe stop is final: the run ends, the bag records it (a `watchdog` event). None:
            never (simulation); `simdist deploy` on hardware gives 1 s.
    """

    def __init__(
        self,
        *,
        robot: Any,
        robot_kind: str,
        actuator: Actuator,
        store: ModelStore,
        planner_config: PlannerConfig,
        limits: ActionLimits | None = None,
        adapted_planner_config: PlannerConfig | None = None,
        command: Callable[[], np.ndarray],
        control_hz: float,
        bag: BagWriter | None = None,
        camera: CameraIngest | None = None,
        realtime: bool = False,
        deadline_fraction: float = 0.8,
        episode_steps: int | None = None,
        stale_after_s: float = 0.1,
        seed: int = 0,
        on_tick: Callable[[int, DeployLoop], None] | None = None,
        scheduling: Scheduling | None = None,
        safe_stop_after_s: float | None = None,
    ) -> None:
        self.robot = robot
        self.safe_stop_after_s = safe_stop_after_s
        self.safe_stopped = False
        # every held tick holds at once; the watchdog says when an outage has lasted long enough to stop safely
        self.watchdog = Watchdog(0.0, safe_stop_after_s)
        self.robot_kind = robot_kind
        self.actuator = actuator
        self.store = store
        self.command = command
        self.period = 1.0 / control_hz
        self.bag = bag
        self.camera = camera
        self.realtime = realtime
        self.deadline_fraction = deadline_fraction
        self.episode_steps = episode_steps
        self.on_tick = on_tick
        self.scheduling = scheduling or Scheduling()
        self.scheduling_problems: list[str] = []  # what of `scheduling` could not be applied (also logged)
        self._scheduled_threads: dict[int, ThreadState | None] = {}  # control threads, as they were before
        model = store.model
        self.planner = Planner(model, planner_config, limits=limits, seed=seed)
        self.adapted_planner: Planner | None = None
        if adapted_planner_config is not None:
            changed = [
                name
                for name in PROCESS_WIDE
                if getattr(adapted_planner_config, name) != getattr(planner_config, name)
            ]
            if changed:
                raise ConfigError(f"the adapted planner config changes {changed[0]}, which is the process's")
            self.adapted_planner = Planner(model, adapted_planner_config, limits=limits, seed=seed)
        self._planning_with: Planner | None = None  # the planner of the last plan computed
        self.history = ObservationHistory(model.history, model.obs_dim, model.act_dim)
        self.ingest = ProprioIngest(robot_kind, stale_after_s=stale_after_s if realtime else float("inf"))
        self.stats = LoopStats()
        self._episode = -1  # episode counter of this run; -1 before the first
        self._episode_open = False
        self._episode_ticks = 0
        self._last_tick: int | None = None  # the last tick index run (a jump means periods were missed)
        self._last_recorded: int | None = None  # the last tick in the bag (its action earns the next reward)
        # a bag with a reward topic (a robot that reports rewards; the ROS stack's tick publisher carries none)
        self._records_reward = schema.REWARD in getattr(bag, "topics", ())
        # the robot starts from where it is measured: at the run's start, and after an episode it ended itself
        self._robot_restarted = True
        self._last_plan: Plan | None = None
        self._plan_tick = 0
        # the adopted plan's lead (1: planned ahead, its step 1 is for the tick after its own)
        self._plan_lead = 0
        self._plan_episode = -1
        self._prev_action: np.ndarray | None = None
        self._needs_reset = True
        self._computed: tuple[int, int] | None = None  # (tick, episode) of the plan the planner computed last
        self._thread: PlanThread | None = None
        self._t0_ns = time.time_ns()
        self._t0 = 0.0
        self._slow_logged_at = -float("inf")
        self._last_kind = "held"  # what the last tick counted as (fresh, late or held)

    # -- clock ---------------------------------------------------------------------------------------------------
    @property
    def lockstep(self) -> bool:
        """A simulator stepped by the ticks themselves (its clock is the simulation's)."""
        return not self.realtime and hasattr(self.robot, "sim_time")

    def _now(self) -> float:
        if not self.lockstep:
            return time.monotonic()
        return float(self.robot.sim_time)

    def _stamp_ns(self, k: int, now: float) -> int:
        if self.realtime:
            return self._t0_ns + int((now - self._t0) * 1e9)
        return self._t0_ns + round(k * self.period * 1e9)

    # -- planning ------------------------------------------------------------------------------------------------
    def _compute(self, job: PlanJob) -> Plan:
        planner = self.adapted_planner if job.adapted and self.adapted_planner is not None else self.planner
        planner.model = job.model
        if job.reset or planner is not self._planning_with:
            # each episode its own draw of the search's noise; a planner taking over starts cold, as at a reset
            planner.reset(job.episode)
            self._computed = None
            self._planning_with = planner
        if planner is self.adapted_planner:
            self.stats.adapted_plans += 1
        # The warm start shifts the plan the planner computed last, so the shift is counted from that plan's
        # tick (not from the last plan the control thread adopted: a late one may not be adopted yet).
        # (0 for the plan ahead made at an episode's first tick, which starts from the same step as that tick's)
        last = self._computed
        elapsed = job.tick - last[0] if last is not None and last[1] == job.episode else 1
        with torch.inference_mode():
            ctx = job.model.context(*job.inputs, job.image)
        plan = planner.act(
            ctx, job.command, max(elapsed, 0), prev_action=job.prev_action, first_action=job.first_action
        )
        self._computed = (job.tick, job.episode)
        return plan

    def _job(
        self, k: int, command: np.ndarray, image: np.ndarray | None, first_action: np.ndarray | None = None
    ) -> PlanJob:
        model = self.store.model
        image_t = None
        if image is not None and getattr(model.config, "image", None) is not None:
            image_t = torch.from_numpy(np.ascontiguousarray(image))[None]
        reset, self._needs_reset = self._needs_reset, False
        return PlanJob(
            tick=k,
            episode=self._episode,
            model=model,
            inputs=self.history.tensors(),
            image=image_t,
            command=torch.from_numpy(np.asarray(command, dtype=np.float32)),
            prev_action=None if self._prev_action is None else torch.from_numpy(self._prev_action),
            reset=reset,
            first_action=None if first_action is None else torch.from_numpy(first_action.copy()),
            adapted=self.adapted_planner is not None and self.store.adapted,
        )

    def _adopt(self, job: PlanJob, result: Plan | BaseException, seconds: float) -> None:
        self.stats.plan_seconds.append(seconds)
        if isinstance(result, BaseException):
            self.stats.errors += 1
            log.error("deploy: planning for tick %d failed: %r", job.tick, result)
            return
        if job.episode != self._episode:  # a plan from the previous episode arriving late
            return
        self._last_plan, self._plan_tick, self._plan_episode = result, job.tick, job.episode
        self._plan_lead = job.lead

    def _adopt_finished(self) -> None:
        """Adopt every plan the planner thread finished since the last look (real time)."""
        assert self._thread is not None
        while True:
            try:
                job, result, seconds = self._thread.take(0)
            except queue.Empty:
                return
            self._adopt(job, result, seconds)

    def _planning_ahead(self) -> bool:
        """This tick's action comes from a plan made ahead (not from one for this tick)."""
        return (
            self.planner.config.plan_ahead
            and self._last_plan is not None
            and self._plan_episode == self._episode
        )

    def _await_ahead(self, deadline: float | None) -> None:
        """Adopt the plans made ahead that finished; one still running (late) is awaited until `deadline`."""
        if not self.realtime:
            return  # lockstep computed it in full at the end of the last tick
        assert self._thread is not None
        self._adopt_finished()
        if self._thread.outstanding and deadline is not None:
            try:
                job, result, seconds = self._thread.take(max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return
            self._adopt(job, result, seconds)

    def _plan_next(self, k: int, action: np.ndarray, command: np.ndarray, image: np.ndarray | None) -> None:
        """Planning ahead: start the plan for tick k+1 from tick k's state, with tick k's action as its step 0
        (before the history records that action: the job's inputs are the state the action is applied in)."""
        job = self._job(k, command, image, first_action=action)
        if not self.realtime:
            start = time.perf_counter()
            self._adopt(job, self._compute(job), time.perf_counter() - start)
        elif self._thread is not None and not self._thread.busy:  # else the late plan finishes first
            self._thread.submit(job)

    def _plan(self, k: int, deadline: float, command: np.ndarray, image: np.ndarray | None) -> None:
        """Make the freshest plan available for tick k, waiting until `deadline` at most (real time)."""
        if not self.realtime:
            job = self._job(k, command, image)
            start = time.perf_counter()
            self._adopt(job, self._compute(job), time.perf_counter() - start)
            return
        assert self._thread is not None
        submitted = False
        self._adopt_finished()  # first, so nothing adopted below is older than it
        while True:
            if not submitted and not self._thread.busy:  # a plan still running for an earlier tick goes first
                self._thread.submit(self._job(k, command, image))
                submitted = True
            try:
                job, result, seconds = self._thread.take(max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return
            self._adopt(job, result, seconds)
            if job.tick == k:
                return

    def _action(self, k: int) -> tuple[np.ndarray | None, str]:
        plan = self._last_plan
        if plan is None or self._plan_episode != self._episode:
            return None, "held"
        if plan.stats.fallback == "hold":  # the model gave nothing usable, not even the base policy: a hold
            return None, "held"
        offset = k - self._plan_tick
        if offset == self._plan_lead:
            return plan.actions[offset].numpy().astype(np.float32), "fresh"
        open_loop = max(1, round(OPEN_LOOP_S / self.period))
        if self._plan_lead < offset <= self._plan_lead + open_loop and offset < plan.actions.shape[0]:
            return plan.actions[offset].numpy().astype(np.float32), "late"
        return None, "held"

    def _hold_action(self) -> np.ndarray:
        """The task action a hold amounts to (the robot's): the Go2 keeps its last targets, the UR5e moves by zero."""
        return self.ingest.description.hold_action(self._prev_action, self.history.act_dim)

    # -- episodes ------------------------------------------------------------------------------------------------
    def _end_episode(self, stamp_ns: int, ended: dict[str, Any] | None) -> None:
        if ended is not None:
            self.stats.episodes.append(ended)
        if not self._episode_open:
            return
        self._episode_open = False
        if self.bag is not None:
            metrics = ended["metrics"] if ended else {}
            success = bool(metrics.get("success", False))
            # whether the episode terminated (a fall, a protective stop) rather than ran out of time
            fields = {"terminated": bool(ended["terminated"])} if ended and "terminated" in ended else {}
            self.bag.end_episode(success=success, stamp_ns=stamp_ns, metrics=metrics, **fields)

    def _start_episode(self, stamp_ns: int, state: Any) -> None:
        self._episode += 1
        self._episode_open = True
        self._episode_ticks = 0
        self.history.reset()
        self._last_plan = None
        self._prev_action = None
        self._needs_reset = True
        # The actuator starts again from the measured state only where the robot itself started again (a simulated
        # robot's reset moves it); an episode the loop ends on a real robot is bookkeeping, and the arm's target
        # carries on from what it holds (from the measured pose instead it would jump by the tracking error).
        if hasattr(self.actuator, "reset") and self._robot_restarted:
            self.actuator.reset(state)
        if self.bag is not None:
            self.bag.start_episode(
                model_version=self.store.label, stamp_ns=stamp_ns, command=[float(x) for x in self.command()]
            )

    # -- one tick ------------------------------------------------------------------------------------------------
    def tick(self, k: int, deadline: float | None = None) -> None:
        """Run control tick k (the loop calls this; tests may too). After a safe stop it does nothing."""
        if self.safe_stopped:
            return
        self._last_kind = "held"  # until the tick counts itself (a tick that fails before that was a hold)
        if self.realtime and self.scheduling.requested:
            self._schedule_control_thread()
        now = self._now()
        stamp = self._stamp_ns(k, now)
        deadline = now + self.deadline_fraction * self.period if deadline is None else deadline
        pending = False
        # the action the robot got this tick (a failure after it sends no hold)
        sent: np.ndarray | None = None
        marks = [time.perf_counter()]  # phase boundaries, to say where a tick longer than its period went
        missed = 0 if self._last_tick is None else k - self._last_tick - 1
        self._last_tick = k
        try:
            if missed > 0 and self.bag is not None and self._episode_open:
                # the bag must not join the ticks either side of skipped periods as consecutive steps
                self.bag.event(schema.TICKS_GAP, stamp_ns=stamp, ticks=missed, reason="missed")
            swapped = self.store.poll()
            if swapped is not None:
                self.stats.swaps += 1
                log.info("deploy: tick %d now plans with dynamics %s", k, self.store.label)
                if self.bag is not None:
                    self.bag.set_model_version(self.store.label, stamp_ns=stamp)
            marks.append(time.perf_counter())
            ended = self.robot.take_episode_end() if hasattr(self.robot, "take_episode_end") else None
            if ended is not None or (self.episode_steps and self._episode_ticks >= self.episode_steps):
                self._end_episode(stamp, ended)
                self._robot_restarted = ended is not None
            state = self.robot.read()
            obs = self.ingest(state, now)
            if not self._episode_open:
                self._start_episode(stamp, state)
            self.history.push(obs.vector)
            pending = True
            command = self.command()
            frame = self.camera.read(now) if self.camera is not None else None
            image = frame.image if frame is not None else None
            marks.append(time.perf_counter())
            action: np.ndarray | None = None
            kind = "held"
            if obs.stale:
                self.stats.stale += 1
            else:
                try:
                    if self._planning_ahead():
                        self._await_ahead(deadline)
                    else:
                        self._plan(k, deadline, command, image)
                    action, kind = self._action(k)
                except Exception:  # a failed plan: hold this tick, log it, and still record the tick
                    self.stats.errors += 1
                    log.exception("deploy: planning for tick %d failed; holding", k)
            marks.append(time.perf_counter())
            if action is None:
                action = self._hold_action()
                self.actuator.hold()
            else:
                result = self.actuator.apply(action, state, now)
                self.stats.intervened(result.flags)
                if result.held:
                    kind = "held"
                    action = self._hold_action()
            sent = action
            self.stats.act_seconds.append(time.perf_counter() - marks[1])
            if self.planner.config.plan_ahead and not obs.stale:
                try:
                    self._plan_next(k, action, command, image)
                except Exception:  # the next tick runs this plan's later steps, or holds
                    self.stats.errors += 1
                    log.exception("deploy: planning ahead from tick %d failed", k)
            marks.append(time.perf_counter())
            self.history.record(action)
            pending = False
            self._prev_action = action
            self._count(kind)
            if self.bag is not None:
                reward = {}  # the reward of the previous tick's action, when that tick is in the bag
                if self._records_reward:
                    follows = self._last_recorded == k - 1
                    reward["reward"] = getattr(state, "reward", None) if follows else None
                self.bag.append(
                    observation=obs.vector,
                    action=action,
                    command=command,
                    state=state,
                    image=image,
                    stamp_ns=stamp,
                    **reward,
                )
                self._last_recorded = k
        except Exception:
            self.stats.errors += 1
            if sent is None:
                log.exception("deploy: tick %d failed; holding", k)
                self._safe_hold()
            else:  # the command went out: it stands for this period (a hold now would be a second command, and in
                # lockstep a second period of physics within one tick)
                log.exception("deploy: tick %d failed after its command was sent", k)
            if pending:  # keep the history consistent: this step's action was the one the robot got
                done = self._hold_action() if sent is None else sent
                self.history.record(done)
                self._prev_action = done
                self._count("held" if sent is None else kind)
        marks.append(time.perf_counter())
        if self.realtime and marks[-1] - marks[0] > self.period:
            self._slow_tick(k, marks)
        self.stats.ticks += 1
        self._episode_ticks += 1
        self.stats.versions.append(self.store.label)
        self._escalate(now, stamp, held=self._last_kind == "held")
        if self.on_tick is not None:
            self.on_tick(k, self)

    def _escalate(self, now: float, stamp_ns: int, *, held: bool) -> None:
        """Held ticks for `safe_stop_after_s` since the last tick that was not a hold become a safe stop (once; the
        run then ends). Armed by the first tick that was not a hold, so a slow first plan never stops a robot that
        has not moved yet. On hardware (a `safe_stop_after_s`) each step is a `watchdog` event in the bag."""
        if not held:
            outage = self.watchdog.good(now)
            if outage is not None and self.safe_stop_after_s is not None:
                log.warning("deploy: plans are back after %.2f s; resuming", outage)
                self._record_watchdog(stamp_ns, RESUME, outage)
            return
        stage = self.watchdog.check(now)
        if stage is None or self.safe_stop_after_s is None:
            return
        age = self.watchdog.age(now)
        if stage == HOLD:
            log.warning("deploy: no usable plan; holding (a safe stop after %.2f s)", self.safe_stop_after_s)
            self._record_watchdog(stamp_ns, HOLD, age)
            return
        assert stage == SAFE_STOP
        self.safe_stopped = True
        self.stats.safe_stops += 1
        try:  # the robot first, the record after
            safe_stop(self.robot, self.actuator)
        except Exception:  # the robot itself is failing: nothing safer to send from here
            log.exception("deploy: the safe stop failed")
        log.error("deploy: no usable plan for %.2f s; safe stop, the run ends", age)
        self._record_watchdog(stamp_ns, SAFE_STOP, age)

    def _confirm_safe_stop(self) -> None:
        """Real time: send the safe stop again each period until the robot has been heard from after it (three
        states newer than the stop) or `SAFE_STOP_CONFIRM_S` passed. A damping command sent while the link was down
        (the robot gone from the network, the very fault that often causes the stop) would otherwise never
        arrive, and the robot would keep its last targets when it comes back."""
        if not self.realtime:
            return
        sent_at = time.monotonic()
        heard = 0
        while heard < 3 and time.monotonic() - sent_at < SAFE_STOP_CONFIRM_S:
            time.sleep(self.period)
            try:
                heard += self.robot.read().timestamp > sent_at
                safe_stop(self.robot, self.actuator)
            except Exception:  # the link is still down: keep trying until the time is up
                log.debug("deploy: confirming the safe stop failed", exc_info=True)
        if heard < 3:
            log.error(
                "deploy: the robot was not heard from within %.0f s of the safe stop", SAFE_STOP_CONFIRM_S
            )

    def _record_watchdog(self, stamp_ns: int, stage: str, age: float) -> None:
        if self.bag is None or not self._episode_open:
            return
        try:
            self.bag.event(schema.WATCHDOG, stamp_ns=stamp_ns, stage=stage, age_s=round(age, 3))
        except Exception:
            log.exception("deploy: recording the watchdog's %s failed", stage)

    def _slow_tick(self, k: int, marks: list[float]) -> None:
        """A tick longer than its period: say where the time went (phases in order, ms); once a second at most,
        except a tick over two periods (it missed one), which is always said."""
        self.stats.slow_ticks += 1
        if marks[-1] - marks[0] <= 2 * self.period and marks[-1] - self._slow_logged_at < 1.0:
            return
        self._slow_logged_at = marks[-1]
        names = ("swap", "read", "plan", "actuate", "log")
        phases = ", ".join(
            f"{name} {(b - a) * 1e3:.1f}" for name, a, b in zip(names, marks, marks[1:], strict=False)
        )
        log.warning(
            "deploy: tick %d took %.1f ms (%s); %d slow ticks so far",
            k,
            (marks[-1] - marks[0]) * 1e3,
            phases,
            self.stats.slow_ticks,
        )

    def _schedule_control_thread(self) -> None:
        """On the first tick from a thread (run()'s, or an outside timer's such as the ROS executor's)."""
        thread = threading.get_native_id()
        if thread in self._scheduled_threads:
            return
        first = not self._scheduled_threads
        self._scheduled_threads[thread] = None
        try:
            if first and self.scheduling.lock_memory:
                problem = lock_memory()
                if problem:
                    self.scheduling_problems.append(problem)
            self._scheduled_threads[thread] = thread_state(thread)
            self.scheduling_problems += apply_to_this_thread(self.scheduling, "control")
        except Exception as exc:  # never a reason to stop controlling: this thread stays as it was
            self.scheduling_problems.append(f"control thread: scheduling failed: {exc!r}")
            log.warning(self.scheduling_problems[-1])

    def _unschedule_control_threads(self) -> None:
        """Normal scheduling again for the threads that ran ticks (the caller's thread lives on after the run)."""
        for thread, state in self._scheduled_threads.items():
            if state is not None:
                restore_thread(thread, state)
        self._scheduled_threads.clear()

    def _count(self, kind: str) -> None:
        self._last_kind = kind
        setattr(self.stats, kind, getattr(self.stats, kind) + 1)

    def _safe_hold(self) -> None:
        try:
            self.actuator.hold()
        except Exception:  # the robot itself is failing: nothing safer to send from here
            log.exception("deploy: hold failed too")

    # -- an outside clock (the ROS 2 planner node's timer drives `tick`) -----------------------------------------
    def open(self, *, warmup: int = 0) -> None:
        """Prepare for `tick(k, deadline)` calls from an outside timer instead of `run()`.

        Plans `warmup` times from a neutral history (the normaliser's mean observation) so that first-call costs
        are paid before control is enabled, then resets the warm start, starts the planner thread (real time) and
        sets the clock that stamps ticks.
        """
        model = self.store.model
        if warmup > 0:
            history = ObservationHistory(model.history, model.obs_dim, model.act_dim)
            history.push(model.normalizer.obs_mean.reshape(-1).cpu().numpy())
            command = model.normalizer.command_mean.reshape(-1).cpu().numpy()
            for _ in range(warmup):
                with torch.inference_mode():
                    ctx = model.context(*history.tensors(), None)
                for planner in (self.planner, self.adapted_planner):
                    if planner is not None:
                        planner.act(ctx, torch.from_numpy(np.asarray(command, dtype=np.float32)), 1)
            self.planner.reset()
        self._needs_reset = True
        if self.realtime and self._thread is None:
            self._thread = PlanThread(self._compute, self.scheduling.planner(), self.scheduling_problems)
        freeze_heap()  # what exists now lives as long as the run: no full collection walks it mid-run
        self._t0, self._t0_ns = time.monotonic(), time.time_ns()

    def close(self) -> None:
        """The end of a run: safe hold (not after a safe stop: it would stiffen a damped robot again; that is
        confirmed instead), stop the planner thread, normal scheduling for the control thread(s). Lockstep (a
        simulator stepped by the ticks) holds nothing: a command there runs a period of physics at once, one step
        beyond the run's ticks that no bag or budget counts."""
        if self.safe_stopped:
            self._confirm_safe_stop()
        elif not self.lockstep:
            self._safe_hold()
        if self._thread is not None:
            self._thread.close()
            self._thread = None
        self._unschedule_control_threads()

    # -- the run -------------------------------------------------------------------------------------------------
    def run(
        self, *, ticks: int | None = None, seconds: float | None = None, stop: threading.Event | None = None
    ) -> LoopStats:
        """Run until `ticks` ticks, `seconds` of robot time (ticks x period), or `stop` is set.

        Ctrl-C ends the run after a safe hold; the caller's BagWriter context then closes the bag.
        """
        limit = (
            ticks if ticks is not None else (round(seconds / self.period) if seconds is not None else None)
        )
        if self.realtime:
            if self._thread is None:  # open() may have started it already
                self._thread = PlanThread(self._compute, self.scheduling.planner(), self.scheduling_problems)
            if hasattr(self.robot, "start"):
                self.robot.start()
        self._t0, self._t0_ns = time.monotonic(), time.time_ns()
        k = 0
        try:
            while (
                (limit is None or k < limit)
                and not (stop is not None and stop.is_set())
                and not self.safe_stopped
            ):
                deadline = None
                if self.realtime:
                    target = self._t0 + k * self.period
                    delay = target - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    elif -delay >= self.period:  # whole periods passed without a tick: they are missed
                        skipped = int(-delay // self.period)
                        self.stats.missed += skipped
                        k += skipped
                        target = self._t0 + k * self.period
                        if limit is not None and k >= limit:
                            break
                    deadline = target + self.deadline_fraction * self.period
                self.tick(k, deadline)
                k += 1
        finally:
            self.close()
            if self.bag is not None and self._episode_open:
                ended = self.robot.take_episode_end() if hasattr(self.robot, "take_episode_end") else None
                if ended is not None:
                    self._end_episode(self._stamp_ns(k, self._now()), ended)
        return self.stats
