"""A cache of builds (machines, models, active evaluations) that keeps a build's checkpoint
out of its key: each `ltvm train --max-seconds` passes its own, and a build made under one
serves every later call."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import update_wrapper
from typing import Callable, Generic, Hashable, TypeVar

Checkpoint = Callable[[str], None]
"""Called with the name of a part of a build before it begins; a time limit raises in it."""


def no_checkpoint(part: str) -> None:
    """The checkpoint of a build that no time limit stops."""


Built = TypeVar("Built")


class BuildCache(Generic[Built]):
    """The 16 builds last used, by their positional arguments, as lru_cache(maxsize=16)
    keeps them, except that the keyword `checkpoint` goes to a build that runs and stays
    out of the key. `typed`: arguments of different types are different keys, as with
    lru_cache(typed=True) (True == 1.0). A build stopped by its checkpoint keeps nothing."""

    def __init__(self, build: Callable[..., Built], size: int = 16, typed: bool = False
                 ) -> None:
        self.build, self.size, self.typed = build, size, typed
        self.results: OrderedDict[tuple[Hashable, ...], Built] = OrderedDict()
        self.lock = threading.Lock()
        update_wrapper(self, build)

    def __call__(self, *arguments: Hashable, checkpoint: Checkpoint | None = None) -> Built:
        key = arguments + tuple(type(a) for a in arguments) if self.typed else arguments
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return self.results[key]
        result = self.build(*arguments, checkpoint=checkpoint)
        with self.lock:
            self.results[key] = result
            if len(self.results) > self.size:
                self.results.popitem(last=False)
        return result

    def cache_clear(self) -> None:
        with self.lock:
            self.results.clear()
