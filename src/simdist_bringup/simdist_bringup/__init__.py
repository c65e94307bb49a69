"""Launch files and configuration for the SimDist ROS 2 stack (installed into share/simdist_bringup)."""
