"""Counts read right at any world size: "1 rank", "3 ranks", never "1 ranks".

The views are rendered at world sizes 1 and 3, after a real launch where
they make one, and every text they show is searched for a count whose noun
disagrees with its number.
"""

from __future__ import annotations

import html
import re

import pytest

from ddp_lesson import views
from ddp_lesson.reports import counted

NOUNS = r"(rank|process|GPU|item|node|epoch)"
#: "1 ranks", "1 processes": a plural after one.
ONE_MANY = re.compile(rf"\b1 {NOUNS}(e?s)\b")
#: "3 rank ", "0 ... 0": a singular after another number, or a range of one.
MANY_ONE = re.compile(rf"\b([02-9]|\d\d+) {NOUNS}\b(?![s(])|\b0 \.\.\. 0\b")


def shown(view) -> str:
    """Every text a view shows: its renderings and its message, tags stripped."""
    parts = [r.data if hasattr(r, "data") else str(r) for r in view.renderings()]
    parts.append(getattr(view.message, "value", ""))
    return html.unescape(re.sub(r"<[^>]+>", " ", " ".join(parts)))


def miscounted(text: str) -> list[str]:
    return [m.group(0) for m in ONE_MANY.finditer(text)] + [
        m.group(0) for m in MANY_ONE.finditer(text)
    ]


def test_the_search_finds_a_wrong_count():
    assert miscounted("starts 1 processes on 3 rank now") == ["1 processes", "3 rank"]
    assert miscounted(f"{counted(1, 'rank')}, {counted(3, 'process', 'processes')}") == []


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("world_size", [1, 3])
def test_the_rank_view_counts_right(world_size):
    view = views.RankAssignment(world_size)
    assert miscounted(shown(view)) == [], shown(view)
    view.launch(timeout_s=120)
    text = shown(view)
    assert "As predicted" in text, text
    assert miscounted(text) == [], text


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("world_size", [1, 3])
def test_the_sampler_explorer_counts_right(world_size):
    explorer = views.SamplerExplorer(size=11, world_size=world_size, epoch=1)
    assert miscounted(shown(explorer)) == [], shown(explorer)
    verdict = explorer.verify(timeout_s=120)
    assert "Verified by a real launch" in verdict.data, verdict.data
    assert miscounted(verdict.data) == [], verdict.data
