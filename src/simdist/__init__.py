"""SimDist: pretrain a world model in simulation, adapt only its dynamics on the real robot."""

__version__ = "0.1.0"
