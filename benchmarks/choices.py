"""What adaptive k saw when it chose in a batch's tail: once the first
sequences of a closed batch end, the batch runs at sizes seen for a round
or two each, which the chooser prices mostly from parts (router/adaptive.py).
Logged beside a row's rounds, these say whether a tail's k came from its
prices, from its gains (sequences near their end keep fewer drafts) or from
probing, against what the pinned rows measured at those sizes.

One entry: [batch, k chosen, least room, most room, the k measured whole at
the batch, ms a round of each k 0..k_max as priced, E(k) of the round's mix].
Read beside what rounds drafted ahead cost in the pinned rows (their round
logs, at every batch size their tails passed through):

    PYTHONPATH=. python benchmarks/choices.py REPORT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from router.acceptance import mix_of
from router.adaptive import KChooser

Choice = list[Any]


@contextmanager
def tail_choices(chooser: KChooser, full: int) -> Iterator[list[Choice]]:
    """Log ``chooser``'s choices of k over fewer than ``full`` sequences while
    inside (none while its k is pinned). Pricing again costs some
    microseconds a tail round, off the full batch's rounds."""
    log: list[Choice] = []
    choose, own = chooser.choose, vars(chooser).get("choose")  # (own: another's wrapper)

    def logged(
        batch: int,
        kinds: Sequence[str] = (),
        *,
        round_number: int,
        rooms: Sequence[int] | None = None,
    ) -> int:
        k = choose(batch, kinds, round_number=round_number, rooms=rooms)
        if batch < full and chooser.pinned is None:
            log.append(seen(chooser, batch, k, kinds, rooms))
        return k

    chooser.choose = logged  # type: ignore[method-assign]
    try:
        yield log
    finally:
        if own is None:
            del chooser.choose
        else:
            chooser.choose = own  # type: ignore[method-assign]


def seen(
    chooser: KChooser, batch: int, k: int, kinds: Sequence[str], rooms: Sequence[int] | None
) -> Choice:
    mix = mix_of(kinds, rooms, chooser.k_max) if kinds else None
    whole = chooser.round_s.get(batch)
    measured = [j for j in range(chooser.k_max + 1) if whole is not None and whole.count(j)]
    prices = [round(1e3 * p, 3) for p in chooser.prices(batch)]
    gains = [round(g, 3) for g in chooser.acceptance.curve(mix)]
    least, most = (min(rooms), max(rooms)) if rooms else (None, None)
    return [batch, k, least, most, measured, prices, gains]


def measured_ms(rows: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Mean ms of a round drafted ahead by (batch size, k), over the pinned rows'
    logs (a row of k = 0 drafts nothing ahead: its rounds all count)."""
    totals: dict[tuple[int, int], list[float]] = {}
    for row in rows:
        if isinstance(row["k"], str):
            continue
        for log in row.get("runs_round_costs", []):
            for size, k, ahead, n, seconds, *_ in log:
                if ahead or not k:
                    got = totals.setdefault((size, k), [0, 0.0])
                    got[0], got[1] = got[0] + n, got[1] + seconds
    return {key: 1e3 * s / n for key, (n, s) in totals.items()}


def describe(choices: list[Choice], measured: dict[tuple[int, int], float]) -> list[str]:
    """Per batch size: the k chosen, the k its prices and gains favour (which
    the chosen one may differ from for reasons other than its prices: a
    probe, the caution that leaving k = 0 takes, k_max before anything is
    measured), and its prices of each k against the pinned rows' (a ratio;
    - unmeasured)."""
    by_size: dict[int, list[Choice]] = {}
    for entry in choices:
        by_size.setdefault(entry[0], []).append(entry)
    said = []
    for size, entries in sorted(by_size.items()):
        chosen = " ".join(str(e[1]) for e in entries)
        best = " ".join(
            str(max(range(len(e[5])), key=lambda j: e[6][j] / max(e[5][j], 1e-9))) for e in entries
        )
        ratios = []
        for k in range(len(entries[0][5])):
            found = measured.get((size, k))
            ratios.append(
                f"{statistics.mean(e[5][k] for e in entries) / found:.2f}" if found else "-"
            )
        rooms = " ".join(f"{e[2]}-{e[3]}" for e in entries)
        said.append(f"b{size}: chose {chosen}; priced best {best}; rooms {rooms}; "
                    f"priced / pinned by k: {' '.join(ratios)}")  # fmt: skip
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    args = parser.parse_args()
    for pair in json.loads(args.report.read_text())["pairs"]:
        measured = measured_ms(pair["rows"])
        for row in pair["rows"]:
            for i, choices in enumerate(row.get("runs_tail_choices", [])):
                if choices:
                    print(f"{pair['wanted_acceptance']} b{row['batch']} {row['k']} pass {i}:")
                    print("\n".join("  " + line for line in describe(choices, measured)))


if __name__ == "__main__":
    main()
