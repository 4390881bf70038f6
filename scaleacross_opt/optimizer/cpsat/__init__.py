"""The CP-SAT model of the plan space, one module per constraint family.

- ``variables``: decision variables (one-hot choices, degrees, per-building counts).
- ``degrees``: degree product = GPUs, micro-batch divisibility, shape channelling, schedule table.
- ``placement``: cross-building mode, building capacity, EP inside buildings, layers per stage.
- ``memory``: per-building memory capacity.
- ``objective``: the linearised step-time lower bound.
- ``feedback``: simulated-time feedback, no-good cuts, plan literals.
- ``extract``: solver values → ``Plan``.
"""
