"""rosbag2 I/O without ROS: the topic schema, message conversions, run writer and episode reader."""

from simdist.bags.reader import read_episodes, read_topics
from simdist.bags.writer import BagWriter, next_run_dir

__all__ = ["BagWriter", "next_run_dir", "read_episodes", "read_topics"]
