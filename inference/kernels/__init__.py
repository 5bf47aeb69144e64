"""Attention kernels for the zero-layer's gated relative-position bias.

`gated_bias_attention` (the Triton kernel) imports Triton; `blocks` (tile geometry and the
computed/skipped block counts) and `reference` (float64 references) do not, so the CPU serving path
can use them without it. Import the kernel from its module, after setting TRITON_INTERPRET=1 when
running it on the CPU.
"""
