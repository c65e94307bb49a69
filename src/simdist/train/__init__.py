"""World-model pretraining (single process or DDP), losses, learning-rate schedule and evaluation."""
