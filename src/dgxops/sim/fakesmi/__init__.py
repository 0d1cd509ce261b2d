"""A stateful fake `nvidia-smi` for simulated DGX nodes (standard library only).

`python3 -m dgxops.sim.fakesmi ARGS` behaves like `nvidia-smi ARGS`;
`python3 -m dgxops.sim.fakesmi.admin ...` (installed as `dgxops-sim`) manages the node state.
See docs/simulator.md.
"""
