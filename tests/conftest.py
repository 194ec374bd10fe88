"""Test-wide settings: one torch CPU thread, so timings do not depend on what else runs."""

import torch

torch.set_num_threads(1)
