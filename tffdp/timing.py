"""Run times that leave out the stretches in which the process was stopped.

A long experiment on a shared machine is often paused (`kill -STOP PID`, Ctrl-Z, a batch
scheduler's preemption) and continued later (`kill -CONT`). `time.perf_counter()` counts
the pause, so a round that straddles one reports minutes or hours of "training"; medians
survive that, sums of wall time (a figure's cost, its "regenerates in under 3 hours"
verdict) do not. (A suspended machine is not a problem: Linux's monotonic clock stops
while the machine sleeps.)

`RunningClock` is a monotonic clock that stops while the process is stopped. A daemon
thread wakes every `tick` seconds; a stopped process runs none of its threads, so a
wake-up more than `threshold` seconds late is a stop, and the lateness is recorded as
paused time. The main thread is never involved, so TensorFlow holding it (or the GIL, for
at most Python's switch interval) does not matter; pauses shorter than `threshold` are not
detected. A timer read in the instant between a resume and the thread's first wake-up
still includes that pause.

`running_clock()` is the one clock of this process (started on first use); the runner
times every round with it and writes the paused time beside the times (`paused_seconds`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional


class RunningClock:
  """A monotonic clock (seconds) that does not advance while the process is stopped.

  Args:
    tick: Seconds between the watcher thread's wake-ups (> 0).
    threshold: Lateness of a wake-up, in seconds, above which it counts as a stop (> 0).
      Pauses shorter than this are counted as running time.
    clock: The underlying monotonic clock (default `time.perf_counter`); tests script it.
    start: Start the watcher thread (tests drive `observe` by hand instead).

  Raises:
    ValueError: `tick` or `threshold` not positive.
  """

  def __init__(self, tick: float = 0.5, threshold: float = 5.0,
               clock: Callable[[], float] = time.perf_counter, start: bool = True):
    if not tick > 0 or not threshold > 0:
      raise ValueError(f'tick and threshold must be > 0, got {tick} and {threshold}.')
    self.tick, self.threshold, self._clock = tick, threshold, clock
    self._lock = threading.Lock()
    self._paused = 0.0
    self._last = clock()
    self._thread: Optional[threading.Thread] = None
    if start:
      self._thread = threading.Thread(target=self._watch, name='tffdp-running-clock',
                                      daemon=True)
      self._thread.start()

  def observe(self, now: float) -> float:
    """Records a wake-up at `now` (underlying clock); returns the pause it detected (s)."""
    with self._lock:
      late = now - self._last - self.tick
      self._last = now
      if late > self.threshold:
        self._paused += late
        return late
      return 0.0

  def _watch(self) -> None:
    while True:
      time.sleep(self.tick)
      self.observe(self._clock())

  def paused(self) -> float:
    """Total detected pause (seconds) since the clock was made."""
    with self._lock:
      return self._paused

  def __call__(self) -> float:
    """Seconds of running time: the underlying clock minus every detected pause."""
    with self._lock:
      return self._clock() - self._paused


_CLOCK: Optional[RunningClock] = None
_CLOCK_LOCK = threading.Lock()


def running_clock() -> RunningClock:
  """This process's `RunningClock` (tick 0.5 s, threshold 5 s), started on first use."""
  global _CLOCK
  with _CLOCK_LOCK:
    if _CLOCK is None:
      _CLOCK = RunningClock()
    return _CLOCK


def _forget_in_child() -> None:
  """A forked child has no watcher thread (and maybe a lock held): it starts its own."""
  global _CLOCK, _CLOCK_LOCK
  _CLOCK, _CLOCK_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
