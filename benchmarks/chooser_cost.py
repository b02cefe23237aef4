"""The adaptive chooser's own host time a round, at each batch size: its
``choose`` (on the round's path: the next round's drafts are sent once it
returns) and ``observe_acceptance`` for each sequence of the round (off it:
the engine applies the results while the drafts sent ahead run).

    PYTHONPATH=. python benchmarks/chooser_cost.py --batch 1 16 64 --k-max 8

The chooser is warmed as a served one is: every k measured whole at the
batch size a while ago (so all but the latest are forgotten and priced by
their parts), its parts timed, and acceptance counted, with every sequence
greedy and room for every draft (the common batch) or, with ``--near-end``,
a quarter of them two tokens from their end.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from router.acceptance import GREEDY
from router.adaptive import KChooser


def warmed(batch: int, k_max: int, rounds: int = 200) -> KChooser:
    """A chooser past ``rounds`` rounds of every k at ``batch`` (made-up prices)."""
    chooser, draws = KChooser(k_max), random.Random(0)
    for number in range(1, rounds):
        for k in range(k_max + 1):
            chooser.observe_round(batch, k, 0.0005 * k, 0.006 + 0.0001 * batch * (k + 1))
            chooser.observe_whole(batch, k, 0.008 + 0.0005 * k, number)
        chooser.observe_between(batch, 0.001)
        for _ in range(batch):
            chooser.observe_acceptance(k_max, draws.randint(0, k_max))
    return chooser


def per_round_us(batch: int, k_max: int, near_end: bool, repeats: int) -> dict[str, float]:
    """Microseconds a round spends in ``choose`` and in observing its sequences."""
    chooser = warmed(batch, k_max)
    kinds = [GREEDY] * batch
    rooms = [2 if near_end and i % 4 == 0 else 1000 for i in range(batch)]
    first = chooser.rounds + 1000  # (past forget_after: a served chooser's state)
    start = time.perf_counter()
    for i in range(repeats):
        chooser.choose(batch, kinds, round_number=first + i, rooms=rooms)
    choose_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        for _ in range(batch):
            chooser.observe_acceptance(k_max, 3)
    observe_s = time.perf_counter() - start
    return {"choose_us": choose_s / repeats * 1e6, "observe_us": observe_s / repeats * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--near-end", action="store_true", help="a quarter near their end")
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    for batch in args.batch:
        row = per_round_us(batch, args.k_max, args.near_end, args.repeats)
        print(json.dumps({"batch": batch, "near_end": args.near_end} | row), flush=True)


if __name__ == "__main__":
    main()
