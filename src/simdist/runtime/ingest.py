"""Sensor ingest for the deploy loop: RobotState -> timestamped proprio observation with a staleness flag, and camera
frames from OpenCV (a device index or a URL) or from the simulator.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simdist import robots
from simdist.errors import RobotConnectionError
from simdist.hardware.state import RobotState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """What the model sees at one tick: the proprio vector, when it was measured, and whether it is too old."""

    timestamp: float  # the state's timestamp (the loop's clock)
    vector: np.ndarray  # (O,) float32, the env's proprio layout
    stale: bool  # older than the limit, or not finite
    age_s: float


class ProprioIngest:
    """Turns each RobotState into the robot's proprio vector and flags stale or non-finite measurements."""

    def __init__(self, robot: str, *, stale_after_s: float = 0.1) -> None:
        self.robot = robot
        self.description = robots.get(robot)
        self.stale_after_s = stale_after_s

    def __call__(self, state: RobotState, now: float) -> Observation:
        vector = self.description.proprio(state)
        age = now - state.timestamp
        stale = age > self.stale_after_s or not bool(np.isfinite(vector).all())
        return Observation(timestamp=state.timestamp, vector=vector, stale=stale, age_s=age)


@dataclass(frozen=True)
class Frame:
    timestamp: float  # time.monotonic() (or the caller's clock) when the frame arrived
    image: np.ndarray  # (H, W, 3) uint8 RGB
    stale: bool


class CameraIngest:
    """The latest RGB frame of a camera, resized to the model's size.

    `source` is an OpenCV device index (0), a URL or file path (rtsp://..., a video file), or a callable returning
    the latest RGB frame (the simulator's camera, `SimRobot.image`). OpenCV sources are read by a grabber thread,
    so `read` never waits for the camera.
    """

    def __init__(
        self,
        source: int | str | Callable[[], np.ndarray | None],
        *,
        width: int = 64,
        height: int = 64,
        stale_after_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = (width, height)
        self.stale_after_s = stale_after_s
        self.clock = clock
        self._latest: tuple[float, np.ndarray] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._capture: Any = None
        if callable(source):
            self._grab: Callable[[], np.ndarray | None] | None = source
        else:
            self._grab = None
            self._open(source)

    def _open(self, source: int | str) -> None:
        try:
            import cv2
        except ImportError:
            raise RobotConnectionError(
                "camera ingest needs OpenCV: pip install opencv-python-headless (or 'simdist[hardware]')"
            ) from None
        capture = cv2.VideoCapture(source)
        if not capture.isOpened():
            raise RobotConnectionError(f"camera {source!r}: cannot open (no such device or unreachable URL)")
        self._capture = capture
        # A video file plays at its own frame rate, as the camera it stands in for would deliver it.
        is_file = isinstance(source, str) and "://" not in source
        fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0) if is_file else 0.0
        self._frame_period = 1.0 / fps if fps > 0 else 0.0
        self._thread = threading.Thread(target=self._grabber, name="camera-grabber", daemon=True)
        self._thread.start()

    def _grabber(self) -> None:
        import cv2

        next_frame = time.monotonic()
        while not self._stop.is_set():
            if self._frame_period:
                next_frame += self._frame_period
                self._stop.wait(max(0.0, next_frame - time.monotonic()))
            ok, bgr = self._capture.read()
            if not ok:  # end of a file, or the stream dropped: keep the last frame, which then goes stale
                self._stop.wait(0.01)
                continue
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            with self._lock:
                self._latest = (self.clock(), self._resize(rgb))

    def _resize(self, image: np.ndarray) -> np.ndarray:
        image = np.asarray(image, dtype=np.uint8)
        if image.shape[1::-1] == self.size:
            return image
        import cv2

        return cv2.resize(image, self.size, interpolation=cv2.INTER_AREA)

    def read(self, now: float | None = None) -> Frame | None:
        """The latest frame, or None before the first one arrived."""
        now = self.clock() if now is None else now
        if self._grab is not None:
            image = self._grab()
            if image is not None:
                with self._lock:
                    self._latest = (now, self._resize(image))
        with self._lock:
            latest = self._latest
        if latest is None:
            return None
        stamp, image = latest
        return Frame(timestamp=stamp, image=image, stale=now - stamp > self.stale_after_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            if self._thread.is_alive():  # blocked in read() on a dead stream: releasing under it is not safe
                log.warning(
                    "camera: the grabber is still blocked in a read; the capture is left to the process"
                )
                return
        if self._capture is not None:
            self._capture.release()
