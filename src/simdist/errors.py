"""Exception classes raised at the project's boundaries; the CLI turns each into one clear line.

Exit codes, one convention: 2 for anything the user gave that is wrong or unusable (configuration, arguments,
checkpoints, datasets, bags), 1 when the robot itself fails (connection, driver). 0 otherwise."""


class SimdistError(Exception):
    """Base class of every error the CLI reports as a single line."""

    exit_code = 2


class ConfigError(SimdistError):
    """A bad task, profile, preset, key, value or type in a configuration or `--set` override."""

    exit_code = 2


class CheckpointError(SimdistError):
    """A world-model or expert checkpoint that is missing, corrupt, truncated or does not match."""


class DatasetError(SimdistError):
    """A dataset shard or manifest that is missing, corrupt or inconsistent."""


class BagError(SimdistError):
    """A rosbag2 recording that is missing a topic, has a wrong type, or is truncated or empty."""


class RobotConnectionError(SimdistError):
    """A robot that cannot be reached, drops its connection, or whose driver package is not installed."""

    exit_code = 1
