"""One torch thread: the machine has 2 shared cores, and oversubscribed threads make tiny models 20x slower."""

import torch

torch.set_num_threads(1)
