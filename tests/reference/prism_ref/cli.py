"""The command line every generator shares: `<generator>.py --out DIR [--seed N]`, so the
C++ tests (prism::test::run_reference) call them all the same way.
"""

import argparse

from .seeding import DEFAULT_SEED


def generator_parser(description):
    """An ArgumentParser with --out and --seed; generators add their own options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="model directory to write (created)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed")
    return parser
