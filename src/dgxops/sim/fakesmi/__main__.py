import sys

from dgxops.sim.fakesmi.cli import main

if __name__ == "__main__":
    sys.exit(main())
