#!/usr/bin/env bash
# Source ROS 2, the SimDist workspace and the core's virtual environment, then run the command.
set -e
source /opt/ros/jazzy/setup.bash
source /ws/install/setup.bash
source /opt/simdist/bin/activate
mkdir -p "${SIMDIST_BAG_DIR:-/data/bags}"
exec "$@"
