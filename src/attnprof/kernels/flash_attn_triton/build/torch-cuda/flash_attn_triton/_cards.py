"""Which measured card a device is, for the settings tables that differ by card (decode.BY_CARD).

A setting is shipped per card only where it was measured on that card (docs/kernel.md gives each run and its
command). A device is matched by name first ("NVIDIA H100 80GB HBM3" is an H100, a "GH200" no H200); a card
no table names (an H800, a GH200, an H100 NVL) takes the measured card of its compute capability nearest in
memory size, which tells HBM generations apart where the SM count and L2 do not (H100 and H200 both have 132
SMs and 50 MB of L2; 80 GB of HBM3 at 3.35 TB/s against 141 GB of HBM3e at 4.8 TB/s); any other device the
table's first row.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import torch


class Card(NamedTuple):
    """A card settings were measured on: the name it reports has `name` as a word."""
    name: str
    capability: tuple[int, int]
    memory_gib: int


H100 = Card("H100", (9, 0), 80)
H200 = Card("H200", (9, 0), 141)


def card_for(name: str, capability: tuple[int, int], memory_gib: float, cards: tuple[Card, ...]) -> Card:
    """The card among `cards` a device of this name, compute capability and memory is taken for."""
    named = [card for card in cards if re.search(rf"\b{card.name}\b", name)]  # a GH200 is no H200
    if named:
        return named[0]
    alike = [card for card in cards if card.capability == capability]
    return min(alike, key=lambda card: abs(card.memory_gib - memory_gib)) if alike else cards[0]


@functools.cache
def device_card(device_index: int, cards: tuple[Card, ...]) -> Card:
    """card_for() of CUDA device `device_index` (read once per device and table)."""
    props = torch.cuda.get_device_properties(device_index)
    return card_for(props.name, (props.major, props.minor), props.total_memory / 2**30, cards)
