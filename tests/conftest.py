"""Without a GPU the Triton kernels run under the interpreter. Triton picks interpreter or compiler
when a kernel is decorated, so the variable is set here, before any test module imports one."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
