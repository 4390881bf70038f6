"""The CP-SAT model of the plan space, one module per constraint family.

- ``variables``: decision variables (one-hot choices, degrees, per-building counts).
- ``degrees``: degree product = GPUs, micro-batch divisibility, shape channelling, schedule table.
- ``placement``: cross-building mode, building capacity, EP inside buildings, layers per stage.
- ``memory``: per-building memory capacity.
- ``objective``: the linearised step-time lower bound, assembled from the term families:
  ``pipeline_chains`` (bubble, chains, V tip, first-stage turn), ``critical_path`` and ``crossings`` (op counts
  and boundary crossings on the op graph's longest path), ``zero3`` (weight gathers, one NIC per layer's
  classes), ``dp_rings`` and ``dp_sync`` (the DP stream), ``resource_bounds`` (NIC and route capacity);
  ``terms``: their shared arithmetic.
- ``build``: the whole model.
- ``extract``: solver values → ``Plan``, a plan → its assignment, no-good cuts.
"""
