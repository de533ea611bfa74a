"""Run times that leave out the stretches in which the process was stopped.

A long experiment on a shared machine is often paused (`kill -STOP PID`, Ctrl-Z, a batch
scheduler's preemption) and continued later (`kill -CONT`). `time.perf_counter()` counts
the pause, so a round that straddles one reports minutes or hours of "training"; medians
survive that, sums of wall time (a figure's cost, its "regenerates in under 3 hours"
verdict) do not. (A suspended machine is not a problem: Linux's monotonic clock stops
while the machine sleeps.)

`RunningClock` is a clock that does not advance while the process is stopped. A daemon
thread wakes every `tick` seconds, and every read of the clock counts as a wake-up too. A
stopped process runs none of its threads, so a wake-up more than `threshold` seconds late,
across which the process used no more CPU time than its threads can use in one and a half
ticks (1.5 `tick` x the number of CPUs: the running stretch before the stop, with a
margin), is a stop, and its lateness is recorded as paused time. A thread that holds the
GIL in one long C call also delays the watcher, but that process keeps using CPU time, so
no pause is recorded, even on cores shared with other processes, as long as it gets more
CPU time than that over the delay (1.5 s with the defaults on 2 CPUs). A process that
holds the GIL while it neither runs nor is stopped (a blocked read, heavy swapping) would
be counted as paused. Pauses shorter than `threshold` (5 s by default) count as running
time, and up to one `tick` (0.5 s) of every pause stays in the running time. Reads never
go backwards: a pause is recorded by whichever read or wake-up first sees it.

`running_clock()` is the one clock of this process (started on first use; a forked child
starts its own); the runner times every round with it and writes the paused time beside
the times (`paused_seconds`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional


class RunningClock:
  """A clock (seconds) that does not advance while the process is stopped.

  Args:
    tick: Seconds between the watcher thread's wake-ups (> 0).
    threshold: Lateness of a wake-up, in seconds, above which it can count as a stop
      (> 0). Pauses shorter than this are counted as running time.
    clock: The underlying monotonic clock (default `time.perf_counter`); tests script it.
    cpu_clock: The process's CPU time, all threads (default `time.process_time`).
    cpus: CPUs the process can use at once (default `os.cpu_count()`).
    start: Start the watcher thread (tests drive `observe` by hand instead).

  Raises:
    ValueError: `tick` or `threshold` not positive.
  """

  def __init__(self, tick: float = 0.5, threshold: float = 5.0,
               clock: Callable[[], float] = time.perf_counter,
               cpu_clock: Callable[[], float] = time.process_time,
               cpus: Optional[int] = None, start: bool = True):
    if not tick > 0 or not threshold > 0:
      raise ValueError(f'tick and threshold must be > 0, got {tick} and {threshold}.')
    self.tick, self.threshold = tick, threshold
    # The most CPU time a gap can hold and still be a stop: every CPU busy for the tick
    # before the stop, with half a tick of margin (the watcher's own wake-up is late too).
    self.cpu_allowance = 1.5 * tick * (cpus or os.cpu_count() or 1)
    self._clock, self._cpu_clock = clock, cpu_clock
    self._lock = threading.Lock()
    self._paused = 0.0
    self._last, self._last_cpu = clock(), cpu_clock()
    self._thread: Optional[threading.Thread] = None
    if start:
      self._thread = threading.Thread(target=self._watch, name='tffdp-running-clock',
                                      daemon=True)
      self._thread.start()

  def _observe_locked(self, now: float, cpu: float) -> float:
    late = now - self._last - self.tick
    used = max(0.0, cpu - self._last_cpu)
    self._last, self._last_cpu = now, cpu
    if late > self.threshold and used <= self.cpu_allowance:
      self._paused += late
      return late
    return 0.0

  def observe(self, now: float, cpu: float) -> float:
    """Records a wake-up at `now` (underlying clock) with the process's CPU time `cpu`;
    returns the pause it detected (seconds)."""
    with self._lock:
      return self._observe_locked(now, cpu)

  def _watch(self) -> None:
    while True:
      time.sleep(self.tick)
      self.observe(self._clock(), self._cpu_clock())

  def read(self) -> tuple[float, float]:
    """`(running seconds, paused seconds)`, read together (one observation)."""
    with self._lock:
      now = self._clock()
      self._observe_locked(now, self._cpu_clock())
      return now - self._paused, self._paused

  def paused(self) -> float:
    """Total detected pause (seconds) since the clock was made."""
    return self.read()[1]

  def __call__(self) -> float:
    """Seconds of running time: the underlying clock minus every detected pause."""
    return self.read()[0]


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
