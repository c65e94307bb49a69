"""A minimal Go2 stand-in for loopback tests: publishes rt/lowstate, follows rt/lowcmd targets, checks CRCs.

Not a physics emulator: joints move a fifth of the way to their PD target each 5 ms tick. Runs until stdin closes,
then prints one JSON line summarising what it received.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from unitree_sdk2py.core.channel import ChannelFactoryInitialize, ChannelPublisher, ChannelSubscriber
from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowState_
from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_, LowState_
from unitree_sdk2py.utils.crc import CRC

STAND = [0.0, 0.9, -1.8] * 4


def main() -> None:
    domain = int(sys.argv[1])
    ChannelFactoryInitialize(domain, "lo")
    crc = CRC()
    lock = threading.Lock()
    q = list(STAND)
    targets: list[float | None] = [None] * 12
    summary = {"received": 0, "crc_ok": 0, "last": None}

    def on_lowcmd(msg: LowCmd_) -> None:
        with lock:
            summary["received"] += 1
            summary["crc_ok"] += int(crc.Crc(msg) == msg.crc)
            motors = msg.motor_cmd
            summary["last"] = {
                "head": list(msg.head),
                "level_flag": msg.level_flag,
                "mode": [m.mode for m in motors],
                "q": [m.q for m in motors],
                "kp": [m.kp for m in motors],
                "kd": [m.kd for m in motors],
            }
            for i in range(12):
                targets[i] = motors[i].q if motors[i].mode == 1 and motors[i].kp > 0 else None

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    publisher = ChannelPublisher("rt/lowstate", LowState_)
    publisher.Init()
    subscriber = ChannelSubscriber("rt/lowcmd", LowCmd_)
    subscriber.Init(on_lowcmd, 10)
    state = unitree_go_msg_dds__LowState_()
    state.imu_state.quaternion = [1.0, 0.0, 0.0, 0.0]
    state.imu_state.accelerometer = [0.0, 0.0, 9.81]
    state.foot_force = [10, 20, 30, 40]
    print("ready", flush=True)
    start = time.monotonic()
    while not stop.is_set():
        with lock:
            for i in range(12):
                if targets[i] is not None:
                    q[i] += 0.2 * (targets[i] - q[i])
                state.motor_state[i].q = q[i]
        state.tick = int((time.monotonic() - start) * 1000)
        state.crc = crc.Crc(state)
        publisher.Write(state)
        time.sleep(0.005)
    with lock:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
