"""Make the checkout importable as ansible_collections.dgxops.fleet and as dgxops."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (os.path.join(ROOT, ".collections"), os.path.join(ROOT, "src")):
    if path not in sys.path:
        sys.path.insert(0, path)

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi")
