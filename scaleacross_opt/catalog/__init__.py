"""Every number that is not derived from first principles, each with its source.

- ``gpus``: accelerator peaks and capacities (vendor datasheets).
- ``network``: network-layer technology defaults and parameters.
- ``coefficients``: efficiencies and overheads of the cost model (fitted or published).
"""
