"""Process-level helpers for the simulation loops (no model knowledge)."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block, then restore its state.

    A simulation creates hundreds of thousands of small objects (tasks, events, records)
    that all live until its result is dropped, so the collector's passes over them during
    the run find nothing and cost a quarter to a third of the time. Reference counting still
    frees everything as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: how often a pool worker checks that its parent is alive, seconds
WATCH_PARENT_S = 1.0


def exit_with_parent(parent: int | None = None) -> None:
    """In a worker process: exit as soon as the process that started it is gone (killed with
    ``kill -9`` it cannot shut its pool down, and the workers would live on): a daemon thread
    polls the parent pid every :data:`WATCH_PARENT_S` seconds (an orphan is re-parented, so
    its parent pid changes)."""
    parent = os.getppid() if parent is None else parent

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(WATCH_PARENT_S)

    threading.Thread(target=watch, name="codesign-parent-watch", daemon=True).start()


def _run_init(parent: int, init: Callable[..., Any] | None, *args: Any) -> None:
    exit_with_parent(parent)
    if init is not None:
        init(*args)


def pool_init(init: Callable[..., Any] | None = None, *args: Any) -> dict[str, Any]:
    """``ProcessPoolExecutor`` keyword arguments whose workers exit with this process and then
    run ``init(*args)``: ``ProcessPoolExecutor(max_workers=n, **pool_init(f, x))``."""
    return {"initializer": _run_init, "initargs": (os.getpid(), init, *args)}


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True
                 ) -> Callable[[int], None]:
    """A progress bar on stderr (tqdm): call it with the count just done; it closes when the
    total is reached (or on -1). It shows only on a terminal (tqdm's ``disable=None``) and when
    ``enabled``; otherwise the calls do nothing."""
    if not enabled or total <= 1:
        return lambda k: None
    from tqdm import tqdm

    bar = tqdm(total=total, unit=unit, desc=desc, leave=False, disable=None, dynamic_ncols=True)

    done = 0

    def update(k: int) -> None:
        nonlocal done
        if k < 0 or done >= total:
            bar.close()
            return
        done += k
        bar.update(k)
        if done >= total:
            bar.close()

    return update


def progress_counter(desc: str, unit: str, enabled: bool = True
                     ) -> tuple[Callable[[str], None], Callable[[], None]]:
    """A progress counter on stderr for work of unknown length (tqdm without a total):
    ``(step(note), close())``; on a terminal only and when ``enabled``."""
    if not enabled:
        return (lambda note: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=None, unit=unit, desc=desc, leave=False, disable=None, dynamic_ncols=True)

    def step(note: str) -> None:
        bar.set_postfix_str(note, refresh=False)
        bar.update(1)

    return step, bar.close


def cumulative_progress(total: int, desc: str, unit: str, enabled: bool = True
                        ) -> Callable[[int, int], None]:
    """:func:`progress_bar` for a producer that reports ``(done so far, total)`` (the
    exporters' callback), not increments."""
    bar = progress_bar(total, desc, unit, enabled)
    last = 0

    def report(done: int, _total: int) -> None:
        nonlocal last
        bar(done - last)
        last = done

    return report


__all__ = ["WATCH_PARENT_S", "cumulative_progress", "exit_with_parent", "no_cyclic_gc", "pool_init",
           "progress_bar", "progress_counter"]
