"""`camera_node`: frames of an OpenCV camera (a device index or a URL) through the core's CameraIngest, published
as sensor_msgs/Image (rgb8) on /simdist/camera/image_raw. The simulated robot publishes its own camera."""

from __future__ import annotations

from typing import Any

from rclpy.node import Node

from simdist.bags import schema
from simdist.runtime.ingest import CameraIngest
from simdist_nodes import conversions
from simdist_nodes.ros_common import FRAMES, declare, now_ns, run_node


class CameraNode(Node):
    def __init__(self) -> None:
        super().__init__("simdist_camera")
        source = str(declare(self, "source", "0", "OpenCV device index or stream URL", dynamic=True))
        width = declare(self, "width", 64, "published width (px), the model's image size")
        height = declare(self, "height", 64, "published height (px)")
        rate = declare(self, "rate_hz", 30.0, "publish rate")
        self.m = conversions.ros_messages()
        self.ingest = CameraIngest(int(source) if source.isdigit() else source, width=width, height=height)
        self.publisher = self.create_publisher(self.m(schema.IMAGE_TYPE), schema.CAMERA, FRAMES)
        self._last: float | None = None
        self.timer = self.create_timer(1.0 / rate, self._on_timer)

    def _on_timer(self) -> None:
        frame = self.ingest.read()
        if frame is None or frame.stale or frame.timestamp == self._last:
            return  # no new frame: publishing the old one again would fake a live camera
        self._last = frame.timestamp
        msg: Any = conversions.image_msg(self.m, now_ns(self), frame.image)
        self.publisher.publish(msg)

    def on_shutdown(self) -> None:
        self.ingest.close()


def main(args: list[str] | None = None) -> int:
    return run_node(CameraNode, name="simdist_camera", threads=1, on_shutdown="on_shutdown", args=args)
