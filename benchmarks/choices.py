"""What adaptive k saw when it chose in a batch's tail: once the first
sequences of a closed batch end, the batch runs at sizes seen for a round
or two each, which the chooser prices mostly from parts (router/adaptive.py).
Logged beside a row's rounds, these say whether a tail's k came from its
prices, from its gains (sequences near their end keep fewer drafts) or from
probing, against what the pinned rows measured at those sizes.

One entry: [batch, k chosen, least room, most room, the k measured whole at
the batch, ms a round of each k 0..k_max as priced, E(k) of the round's mix].
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
    choose = chooser.choose

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
        del chooser.choose


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
