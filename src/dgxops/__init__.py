"""dgxops: drive the dgxops.fleet collection from Python, and simulate DGX nodes.

Kept import-light on purpose: simulated nodes import ``dgxops.sim.fakesmi`` with only
the standard library available.
"""

__version__ = "0.1.0"
