"""BuildCache: builds kept by their arguments, the checkpoint out of the key."""

from __future__ import annotations

import pytest

from vm.common.cache import BuildCache


def _counting(typed: bool = False) -> tuple[BuildCache, list[tuple]]:
    calls: list[tuple] = []

    def build(*arguments, checkpoint=None):
        calls.append(arguments)
        if checkpoint is not None:
            checkpoint("the only part")
        return list(arguments)

    return BuildCache(build, size=2, typed=typed), calls


def test_a_build_serves_every_later_call_whatever_its_checkpoint():
    cache, calls = _counting()
    parts: list[str] = []
    first = cache(1, "a", checkpoint=parts.append)
    assert cache(1, "a") is first and cache(1, "a", checkpoint=parts.append) is first
    assert calls == [(1, "a")] and parts == ["the only part"]


def test_a_typed_cache_keeps_true_apart_from_one():
    """fleq_machine was lru_cache(typed=True): untyped, True got the temperature-1 machine."""
    untyped, _ = _counting()
    typed, calls = _counting(typed=True)
    assert untyped(True) is untyped(1.0)
    assert typed(True) is not typed(1.0) and calls == [(True,), (1.0,)]


def test_a_build_stopped_by_its_checkpoint_keeps_nothing_and_the_oldest_goes_first():
    cache, calls = _counting()

    def stop(part: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache(1, checkpoint=stop)
    kept = cache(1)
    cache(2), cache(3)  # size 2: 1 goes
    assert cache(1) is not kept and calls == [(1,), (1,), (2,), (3,), (1,)]
