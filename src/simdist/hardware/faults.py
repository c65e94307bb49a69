"""`simdist bench faults`: the deploy stack against a robot's emulator (`simdist emulate`: the Go2 on DDS, the UR5e
behind RTDE) with one fault at a time, each measured where it matters: at the emulated robot (every command it
received checked against the robot's limits, when the robot was stopped: the Go2's damping, the UR5e's servoStop or
its script stopping) and in the bag (how many of the run's ticks it kept).

Faults (seconds after the first command): the robot's state delayed 0.1 s and 1 s, or dropped for good, and the robot
leaving the network for 2 s (the Go2's DDS channels, the UR5e controller's sockets; the emulator's `--fault`); an
exception in every plan, and NaN from the world model for 0.5 s (patched into the deploy process, which is otherwise
`simdist deploy`); CPU load (two busy processes beside it) and a real `simdist finetune` beside it, training the
dynamics at one thread on the bags of the runs before it, as a robot's finetune node does; a malformed config
(deploy must refuse in one line and send nothing); for the Go2 also a corrupt bag (finetune must refuse in one line) and finetune killed while it trains
and writes (every version in the model folder must still load). Each run is its own emulator and deploy process on
its own address (a DDS domain for the Go2, a loopback address for the UR5e, whose RTDE ports are fixed). The table
is printed and the whole result saved as JSON (`--out`, default runs/faults/faults.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simdist.atomic import write_text
from simdist.errors import ConfigError

START_S = 3.0  # faults begin this long after the first command (the loop is warm and walking by then)


@dataclass(frozen=True)
class Scenario:
    name: str
    emulator: tuple[str, ...] = ()  # the emulator's --fault values
    deploy: tuple[str, ...] = ()  # faults patched into the deploy process (KIND:START:DURATION)
    load: int = 0  # busy processes beside the stack
    finetune: bool = False  # a real dynamics finetune beside the stack, on the bags of the runs before it
    deploy_args: tuple[str, ...] = ()  # extra deploy arguments
    expect_stop: bool = False  # a safe stop is the right outcome
    expect_hold: bool = False  # held ticks, then running again (an outage shorter than the safe stop's 1 s)
    expect_refusal: bool = False  # deploy must refuse to start
    stop_within_s: float = 1.5  # the safe stop reaches the robot this soon after the fault began
    notes: str = ""


def _common(vanish: str, vanish_notes: str, exception_notes: str) -> tuple[Scenario, ...]:
    """The scenarios every robot runs; `vanish`: the name of the robot leaving the network."""
    return (
        Scenario("none"),
        Scenario("state_delay_0.1s", emulator=(f"state_gap:{START_S}:0.1",)),
        Scenario(
            "state_delay_1s",
            emulator=(f"state_gap:{START_S}:1",),
            expect_hold=True,
            notes="stale after 0.1 s: held 0.9 s, under the 1 s safe stop",
        ),
        Scenario("state_dropped", emulator=(f"state_gap:{START_S}:1000",), expect_stop=True),
        Scenario(
            vanish,
            emulator=(f"vanish:{START_S}:2",),
            expect_stop=True,
            stop_within_s=2.5,
            notes=vanish_notes,
        ),
        Scenario(
            "planner_exception",
            deploy=(f"planner_exception:{START_S}:1000",),
            expect_stop=True,
            stop_within_s=2.0,
            notes=exception_notes,
        ),
        Scenario("nonfinite_model_0.5s", deploy=(f"nonfinite_model:{START_S}:0.5",), expect_hold=True),
        Scenario("cpu_load", load=2),
        Scenario("finetune_beside", finetune=True, notes="a dynamics finetune at 1 thread on the runs' bags"),
        Scenario("malformed_config", deploy_args=("--planner-set", "num_samples=-3"), expect_refusal=True),
    )


@dataclass(frozen=True)
class BenchRobot:
    """How the bench reaches one robot's emulator and reads its summary."""

    address: Any  # (run index) -> the emulator's address, as deploy's --robot takes it after '<robot>:'
    commands_key: str  # the summary's count of commands received
    stops_key: str  # the summary's times the robot was stopped (seconds after the first command)
    scenarios: tuple[Scenario, ...]
    ticks_per_s: int  # the task's control rate: the bag may lose at most a second of ticks
    bag_faults: bool = False  # also the corrupt bag and finetune killed
    emulator_args: tuple[str, ...] = ()


ROBOTS = {
    "go2": BenchRobot(
        address=lambda i: f"lo:{40 + os.getpid() % 100 + i}",
        commands_key="lowcmd",
        stops_key="damping_at_s",
        scenarios=_common(
            "robot_leaves_dds_2s",
            "gone 2 s: the safe stop is repeated until the robot is heard from",
            "the last plan's steps run out (0.5 s), then 1 s of hold",
        ),
        ticks_per_s=50,
        bag_faults=True,
    ),
    # ur_rtde's ports are fixed: one loopback address per run; its safe stop is the hold (servoStop) at once
    "ur5e": BenchRobot(
        address=lambda i: f"127.{os.getpid() % 200 + 20}.{100 + i}.1",
        commands_key="servo_commands",
        stops_key="stopped_at_s",
        scenarios=_common(
            "controller_vanishes_2s",
            "sockets gone 2 s: the RTDE watchdog stops the script at the arm",
            "the last plan's steps for 0.5 s (OPEN_LOOP_S), then servoStop",
        ),
        ticks_per_s=10,
    ),
}
SCENARIOS = ROBOTS["go2"].scenarios


@dataclass
class Outcome:
    name: str
    ok: bool = False
    unsafe_commands: int | None = None
    unsafe_reasons: list[str] = field(default_factory=list)
    # why the robot stopped, as it says (the UR5e: servoStop, protective_stop, ...)
    robot_stops: list[str] | None = None
    # finetune_beside: whether the finetune was still training when the run ended (None: it never started)
    finetune_trained: bool | None = None
    commands: int | None = None
    ticks: int | None = None
    bag_ticks: int | None = None
    late: int | None = None
    held: int | None = None
    missed: int | None = None
    stale: int | None = None
    safe_stop: bool | None = None
    time_to_safe_stop_s: float | None = (
        None  # from the fault's start to the robot's stop (damping, servoStop)
    )
    exit_code: int | None = None
    error_line: str | None = None
    notes: str = ""


# -- the deploy process's side (patched faults) ------------------------------------------------------------------


def _patch(faults: list[str]) -> None:
    """Install deploy-side faults, timed from the loop's first plan."""
    import torch

    from simdist.model.world_model import WorldModel
    from simdist.runtime.loop import DeployLoop

    started: list[float] = []
    windows = []
    for text in faults:
        kind, start, duration = text.split(":")
        windows.append((kind, float(start), float(duration)))

    def active(kind: str) -> bool:
        if not started:
            return False
        t = time.monotonic() - started[0]
        return any(k == kind and s <= t < s + d for k, s, d in windows)

    compute = DeployLoop._compute

    def faulty_compute(self: DeployLoop, job: Any) -> Any:
        if not started:
            started.append(time.monotonic())
        if active("planner_exception"):
            raise RuntimeError("injected planner fault")
        return compute(self, job)

    def nan_output(original: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            return torch.full_like(out, torch.nan) if active("nonfinite_model") else out

        return call

    DeployLoop._compute = faulty_compute  # type: ignore[method-assign]
    WorldModel.predict = nan_output(WorldModel.predict)  # type: ignore[method-assign]
    WorldModel.propose = nan_output(WorldModel.propose)  # type: ignore[method-assign]


def child(argv: list[str]) -> int:
    """`python -m simdist.hardware.faults FAULTS_JSON TASK ROBOT MODEL SECONDS BAG_DIR`: one deploy run, its
    summary as one JSON line."""
    faults, task, robot, model, seconds, bag_dir = argv
    _patch(json.loads(faults))
    from simdist.bags import read_episodes
    from simdist.runtime.deploy import run_deploy

    result = run_deploy(task, robot, model, seconds=float(seconds), realtime=True, bag_dir=bag_dir)
    summary = result.stats.summary()
    bag_ticks = sum(len(e["proprio"]) for e in read_episodes(result.bag)) if result.bag else None
    print(json.dumps({"stats": summary, "bag": str(result.bag), "bag_ticks": bag_ticks}), flush=True)
    return 0


# -- the bench's side ---------------------------------------------------------------------------------------------


def _python() -> list[str]:
    return [sys.executable]


def _simdist(*args: str) -> list[str]:
    """The command line of `simdist ARGS...` in this interpreter."""
    return [*_python(), "-m", "simdist.cli", *args]


def _run_module(module: str, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS...` in this interpreter, its output captured."""
    return subprocess.run(
        [*_python(), "-m", module, *args], capture_output=True, text=True, env=_env(), timeout=timeout
    )


def _stop_emulator(emulator: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGINT (the emulator prints its summary and exits), killed if it does not within 20 s; its output."""
    emulator.send_signal(signal.SIGINT)
    try:
        return emulator.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        emulator.kill()
        return emulator.communicate()


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2])
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _error_line(stderr: str) -> str | None:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("simdist: error:")]
    return lines[-1] if lines else None


def _robot_of(task: str) -> str:
    from simdist.sim.config import load_task

    return load_task(task).robot


def run_scenario(
    scenario: Scenario, *, task: str, model: str, seconds: float, address: str, out_dir: Path
) -> Outcome:
    """One scenario: the emulator at `address` (as deploy's --robot takes it after '<robot>:'), the deploy run."""
    kind = _robot_of(task)
    bench_robot = ROBOTS[kind]
    outcome = Outcome(scenario.name, notes=scenario.notes)
    emulate = _simdist("emulate", "--task", task, "--address", address, "--seconds", str(seconds + 20.0))
    for fault in scenario.emulator:
        emulate += ["--fault", fault]
    emulate += bench_robot.emulator_args
    emulator = subprocess.Popen(
        emulate, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    load = [subprocess.Popen([*_python(), "-c", "while True: pass"]) for _ in range(scenario.load)]
    finetune = _finetune_beside(model, out_dir, seconds) if scenario.finetune else None
    if scenario.finetune and finetune is None:
        outcome.notes = "no bag from the plain run ('none') to finetune on"
    try:
        assert emulator.stdout is not None
        emulator.stdout.readline()  # "emulating a go2 ..."
        bag_dir = out_dir / scenario.name
        if scenario.expect_refusal:
            deploy = _simdist("deploy", "--task", task, "--robot", f"{kind}:{address}")
            deploy += ["--model", model, "--minutes", str(seconds / 60.0), "--bag-dir", str(bag_dir)]
            done = subprocess.run(
                [*deploy, *scenario.deploy_args], capture_output=True, text=True, env=_env(), timeout=120
            )
            outcome.exit_code, outcome.error_line = done.returncode, _error_line(done.stderr)
        else:
            args = [
                json.dumps(list(scenario.deploy)),
                task,
                f"{kind}:{address}",
                model,
                str(seconds),
                str(bag_dir),
            ]
            try:
                done = _run_module("simdist.hardware.faults", args, timeout=seconds + 120)
            except subprocess.TimeoutExpired as hung:
                # a deploy that never ends is a failed scenario, not a crash of the bench
                raw = hung.stderr or ""
                text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
                tail = text.strip().splitlines()
                done = subprocess.CompletedProcess(hung.cmd, -9, "", text)
                outcome.notes += f"; the deploy hung (killed after {seconds + 120:g} s)" + (
                    f", last line: {tail[-1]}" if tail else ""
                )
            outcome.exit_code = done.returncode
            report = _last_json(done.stdout)
            if report is None:
                tail = done.stderr.strip().splitlines()
                outcome.error_line = _error_line(done.stderr) or (tail[-1] if tail else "no report")
            else:
                stats = report["stats"]
                outcome.ticks, outcome.bag_ticks = stats["ticks"], report["bag_ticks"]
                outcome.late, outcome.held, outcome.missed = stats["late"], stats["held"], stats["missed"]
                outcome.stale, outcome.safe_stop = stats["stale"], stats["safe_stops"] > 0
    finally:
        if finetune is not None:
            outcome.finetune_trained = finetune.poll() is None
            if outcome.finetune_trained:
                outcome.notes += "; it trained throughout"
            else:
                said = _error_line((out_dir / "finetune_beside" / "finetune.log").read_text(errors="replace"))
                outcome.notes += f"; it ended early (exit {finetune.returncode}{': ' + said if said else ''})"
        for proc in [*load, *([finetune] if finetune is not None else [])]:
            proc.kill()
        stdout, _ = _stop_emulator(emulator)
    robot = _last_json(stdout) or {}
    outcome.unsafe_commands = robot.get("unsafe_commands")
    outcome.unsafe_reasons = robot.get("unsafe_reasons", [])
    outcome.robot_stops = robot.get("stop_reasons")
    outcome.commands = robot.get(bench_robot.commands_key)
    stops = [t for t in robot.get(bench_robot.stops_key, []) if t >= START_S]
    if scenario.expect_stop and outcome.safe_stop and stops:
        outcome.time_to_safe_stop_s = round(stops[0] - START_S, 3)
    outcome.ok = _judge(scenario, outcome, seconds, bag_slack=bench_robot.ticks_per_s)
    return outcome


def _plain_run_bag(out_dir: Path) -> Path | None:
    """The bag of the fault-free run ('none'), the data of the finetune faults."""
    return next((out_dir / "none").glob("run_*"), None) if (out_dir / "none").is_dir() else None


def _finetune_beside(model: str, out_dir: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    """`simdist finetune` of the dynamics on the bags of the runs so far (the plain run's at least), one thread,
    into a scratch model of its own, for longer than the run (killed when the run ends), as a robot's finetune node
    trains beside its controller. Its error output goes to finetune_beside/finetune.log."""
    if _plain_run_bag(out_dir) is None:
        return None
    bags = sorted(
        bag
        for bag in out_dir.glob("*/run_*")
        if bag.parent.name not in ("corrupt_bag", "finetune_beside", "finetune_killed")
    )
    work = out_dir / "finetune_beside"
    work.mkdir(parents=True, exist_ok=True)
    command = _simdist("finetune", "--model", model, "--out", str(work / "model"))
    for bag in bags:
        command += ["--bag", str(bag)]
    command += ["--threads", "1", "--max-minutes", f"{seconds / 60.0 + 2.0:g}"]
    command += ["--max-steps", "1000000", "--max-epochs", "1000000", "--patience", "1000000"]
    with open(work / "finetune.log", "wb") as log_file:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log_file, env=_env())


def _judge(scenario: Scenario, o: Outcome, seconds: float, *, bag_slack: int = 50) -> bool:
    """No unsafe command reached the robot, and the run did what it should: refused in one line (a malformed
    config; the robot got no command), stopped safely (soon enough after the fault, at the robot), or ran to its end;
    the bag kept every tick but at most the last second's."""
    if o.unsafe_commands != 0:
        return False
    if scenario.finetune and not o.finetune_trained:
        return False  # the load this scenario is about was not there
    if scenario.expect_refusal:
        return o.exit_code not in (0, None) and o.error_line is not None and o.commands == 0
    if o.ticks is None or o.bag_ticks is None or o.ticks - o.bag_ticks > bag_slack:
        return False
    if scenario.expect_stop:
        return (
            bool(o.safe_stop)
            and o.time_to_safe_stop_s is not None
            and o.time_to_safe_stop_s <= scenario.stop_within_s
        )
    if scenario.expect_hold and not (o.held or 0) >= max(bag_slack // 5, 2):  # 0.2 s of held ticks
        return False
    return not o.safe_stop


def _corrupt_bag(model: str, out_dir: Path, source: Path | None) -> Outcome:
    """finetune on a bag whose data file is cut in half: one error line, a non-zero exit, no new version."""
    outcome = Outcome("corrupt_bag")
    if source is None or not source.is_dir():
        outcome.notes = "no bag from the earlier runs to corrupt"
        return outcome
    import shutil

    bag = out_dir / "corrupt_bag" / source.name
    shutil.rmtree(bag, ignore_errors=True)
    shutil.copytree(source, bag)
    data = max((p for p in bag.iterdir() if p.suffix in (".mcap", ".db3")), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    work = out_dir / "corrupt_bag" / "model"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(model, work)
    before = sorted((work / "dynamics").glob("v*.safetensors"))
    finetune = ["finetune", "--bag", str(bag), "--model", str(work), "--in-place", "--max-steps", "20"]
    done = subprocess.run(
        _simdist(*finetune),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    outcome.exit_code, outcome.error_line = done.returncode, _error_line(done.stderr)
    after = sorted((work / "dynamics").glob("v*.safetensors"))
    outcome.unsafe_commands = 0  # no robot in this one
    outcome.ok = done.returncode != 0 and outcome.error_line is not None and after == before
    outcome.notes = "finetune on a bag cut in half"
    return outcome


def _finetune_killed(model: str, out_dir: Path, source: Path | None, kills: int = 4) -> Outcome:
    """finetune killed (SIGKILL) at spread-out moments of its run, each time from the same copy: afterwards every
    version in the folder loads and `current` names a complete one (no half-written file is ever visible)."""
    from simdist.model.checkpoint import current_version, list_versions, load_checkpoint

    outcome = Outcome("finetune_killed", unsafe_commands=0, notes=f"SIGKILL at {kills} moments")
    if source is None or not source.is_dir():
        outcome.notes = "no bag from the earlier runs to finetune on"
        return outcome
    import shutil

    work = out_dir / "finetune_killed" / "model"
    problems, finished = [], 0
    for i in range(kills):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(model, work)
        finetune = ["finetune", "--bag", str(source), "--model", str(work), "--in-place", "--max-steps", "60"]
        proc = subprocess.Popen(
            _simdist(*finetune),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(),
        )
        try:
            proc.wait(timeout=4.0 + 3.0 * i)  # later and later into the run: loading, training, writing
            finished += 1
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        try:
            for version in list_versions(work):
                load_checkpoint(work, version=version)
            load_checkpoint(work, version=current_version(work))
        except Exception as exc:  # what the store must never show
            problems.append(f"kill {i}: {exc}")
    outcome.ok = not problems
    outcome.error_line = "; ".join(problems) or None
    outcome.notes += f", {finished} runs finished before their kill"
    return outcome


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from simdist.runtime.deploy import resolve_model

    task = args.task
    kind = _robot_of(task)
    if kind not in ROBOTS:
        raise ConfigError(
            f"bench faults: no emulator to run task {task} against (robots: {', '.join(ROBOTS)})"
        )
    bench_robot = ROBOTS[kind]
    model = str(resolve_model(task, getattr(args, "model", None)))
    seconds = float(getattr(args, "seconds", None) or 8.0)
    out_dir = Path(getattr(args, "out", None) or "runs/faults")
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = getattr(args, "faults", None)
    chosen = [s for s in bench_robot.scenarios if not wanted or s.name in wanted.split(",")]
    outcomes = []
    for i, scenario in enumerate(chosen):
        address = bench_robot.address(i)
        outcomes.append(
            run_scenario(scenario, task=task, model=model, seconds=seconds, address=address, out_dir=out_dir)
        )
    source = _plain_run_bag(out_dir)
    extra = bench_robot.bag_faults
    if extra and (not wanted or "corrupt_bag" in wanted.split(",")):
        outcomes.append(_corrupt_bag(model, out_dir, source))
    if extra and (not wanted or "finetune_killed" in wanted.split(",")):
        outcomes.append(_finetune_killed(model, out_dir, source))
    result = {
        "task": task,
        "model": model,
        "seconds": seconds,
        "fault_start_s": START_S,
        "outcomes": [o.__dict__ for o in outcomes],
        "all_ok": all(o.ok for o in outcomes),
        "saved": str(out_dir / "faults.json"),
    }
    write_text(out_dir / "faults.json", json.dumps(result, indent=1) + "\n")
    return result


def summary(result: dict[str, Any]) -> str:
    lines = [
        f"faults against the emulated {result['task']} ({result['seconds']:g} s runs, faults from "
        f"{result['fault_start_s']:g} s); checked at the robot",
        f"{'fault':22} {'ok':3} {'unsafe':>6} {'cmds':>5} {'ticks':>5} {'in bag':>6} {'late':>5} {'held':>5} "
        f"{'missed':>6} {'stale':>5} {'stop':>5} {'to stop s':>9}  exit / error line",
    ]
    for o in result["outcomes"]:

        def f(v: Any) -> str:
            return "-" if v is None else str(v)

        lines.append(
            f"{o['name']:22} {'yes' if o['ok'] else 'NO':3} {f(o['unsafe_commands']):>6} {f(o['commands']):>5} "
            f"{f(o['ticks']):>5} {f(o['bag_ticks']):>6} {f(o['late']):>5} {f(o['held']):>5} {f(o['missed']):>6} "
            f"{f(o['stale']):>5} {f(o['safe_stop']):>5} {f(o['time_to_safe_stop_s']):>9}  "
            f"{f(o['exit_code'])} {o['error_line'] or ''} {o['notes']}".rstrip()
        )
    lines.append(f"saved: {result['saved']}")
    return "\n".join(lines)


if __name__ == "__main__":
    from simdist.hardware.robot import leave_past_stuck_drivers

    sys.exit(leave_past_stuck_drivers(child(sys.argv[1:])))
