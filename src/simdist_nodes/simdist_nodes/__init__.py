"""SimDist's ROS 2 nodes: thin adapters between ROS topics and the `simdist` core runtime."""
