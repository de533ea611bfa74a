"""RunningClock: pauses (SIGSTOP) are left out of run times, scripted and for real."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tffdp import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Scripted:
  def __init__(self, t=100.0):
    self.t = t

  def __call__(self):
    return self.t


def test_scripted_wakeups_count_only_idle_lateness_above_threshold():
  wall, cpu = Scripted(), Scripted(0.0)
  clock = timing.RunningClock(tick=0.5, threshold=5.0, clock=wall, cpu_clock=cpu, cpus=2,
                              start=False)
  wall.t += 0.5
  assert clock.observe(wall.t, cpu.t) == 0.0  # on time
  wall.t += 5.4
  assert clock.observe(wall.t, cpu.t) == 0.0  # 4.9 s late: below the threshold, running
  assert clock() == pytest.approx(105.9)
  wall.t += 60.5
  cpu.t += 1.4  # both CPUs busy before the stop: within 1.5 ticks of 2 CPUs
  assert clock.observe(wall.t, cpu.t) == pytest.approx(60.0)  # stopped: the lateness
  assert clock.paused() == pytest.approx(60.0)
  assert clock() == pytest.approx(166.4 - 60.0)
  wall.t += 0.5
  assert clock.observe(wall.t, cpu.t) == 0.0
  wall.t += 30.5
  cpu.t += 30.0  # late because one C call held the GIL: the process ran all along
  assert clock.observe(wall.t, cpu.t) == 0.0
  wall.t += 30.5
  cpu.t += 3.0  # the same on cores shared with other processes (10% of a CPU)
  assert clock.observe(wall.t, cpu.t) == 0.0
  assert clock.paused() == pytest.approx(60.0)


def test_a_read_books_a_pause_the_watcher_has_not_seen_and_never_goes_back():
  wall, cpu = Scripted(), Scripted(0.0)
  clock = timing.RunningClock(tick=0.5, threshold=5.0, clock=wall, cpu_clock=cpu, cpus=2,
                              start=False)
  before = clock()
  wall.t += 20.0  # stopped 20 s; the first read after the resume comes before the watcher
  after, paused = clock.read()
  assert paused == pytest.approx(19.5)
  assert after - before == pytest.approx(0.5)
  assert clock.observe(wall.t + 0.5, cpu.t) == 0.0  # the watcher's wake-up: nothing new
  assert clock() >= after


@pytest.mark.parametrize('tick,threshold', [(0, 1), (0.5, 0), (-1, 5)])
def test_bad_tick_or_threshold_named(tick, threshold):
  with pytest.raises(ValueError, match='tick and threshold'):
    timing.RunningClock(tick=tick, threshold=threshold, start=False)


def test_running_clock_is_one_per_process():
  assert timing.running_clock() is timing.running_clock()


CHILD = textwrap.dedent('''
    import sys, time
    from tffdp import timing
    clock = timing.RunningClock(tick=0.05, threshold=0.5)
    t0, r0 = time.perf_counter(), clock()
    print('ready', flush=True)
    sys.stdin.readline()
    time.sleep(0.3)  # the watcher's first wake-up after the resume
    print(time.perf_counter() - t0, clock() - r0, clock.paused(), flush=True)
''')


def test_a_long_c_call_holding_the_gil_is_not_a_pause():
  code = textwrap.dedent('''
      import time
      from tffdp import timing
      clock = timing.RunningClock(tick=0.05, threshold=0.5)
      t0 = time.perf_counter()
      sum(range(80_000_000))  # one C call: the watcher cannot run meanwhile
      time.sleep(0.3)
      print(time.perf_counter() - t0, clock.paused(), flush=True)
  ''')
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=True).stdout
  elapsed, paused = map(float, out.split())
  assert elapsed > 1.0  # longer than the threshold, so the old rule would have fired
  assert paused == 0.0


def test_a_real_sigstop_is_left_out():
  child = subprocess.Popen([sys.executable, '-c', CHILD], cwd=ROOT, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    assert child.stdout.readline().strip() == 'ready'
    os.kill(child.pid, signal.SIGSTOP)
    time.sleep(2.0)
    os.kill(child.pid, signal.SIGCONT)
    child.stdin.write('go\n')
    child.stdin.flush()
    elapsed, running, paused = map(float, child.stdout.readline().split())
  finally:
    child.kill()
    child.wait()
  assert 1.5 < paused < 2.5
  assert elapsed > 2.0
  assert running == pytest.approx(elapsed - paused, abs=0.05)


def test_runner_rows_leave_a_pause_out(tmp_path, data_dir):
  """A toy run stopped for 8 s (its process group, as `kill -STOP -PGID` does)."""
  out = tmp_path / 'run'
  args = [sys.executable, '-m', 'tffdp.run', '--method', 'fedavg', '--dataset', 'mnist',
          '--data-dir', str(data_dir), '--rounds', '30', '--clients', '4',
          '--clients-per-round', '2', '--partition', 'iid', '--model', 'logistic_regression',
          '--batch-size', '100', '--num-validation', '500', '--out', str(out)]
  child = subprocess.Popen(args, cwd=ROOT, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  try:
    deadline = time.monotonic() + 300
    while not _rows(out) and time.monotonic() < deadline and child.poll() is None:
      time.sleep(0.05)
    assert _rows(out), 'the run wrote no round'
    start = time.monotonic()
    os.killpg(child.pid, signal.SIGSTOP)
    time.sleep(8.0)
    os.killpg(child.pid, signal.SIGCONT)
    assert child.wait(timeout=300) == 0
    elapsed = time.monotonic() - start
  finally:
    if child.poll() is None:
      os.killpg(child.pid, signal.SIGKILL)
  rows = _rows(out)
  assert len(rows) == 30
  paused = [float(r['paused_seconds']) for r in rows]
  assert 7.0 < sum(paused) < 9.0
  assert sum(p > 0 for p in paused) == 1  # all in the round it fell into (or the next)
  pausing = paused.index(max(paused))
  assert float(rows[pausing]['round_seconds']) < 5.0  # a toy round, the pause left out
  with open(out / 'summary.json') as f:
    summary = json.load(f)
  assert summary['paused_seconds'] == pytest.approx(sum(paused), abs=0.01)
  assert summary['wall_seconds'] < elapsed - 6.0 + float(rows[0]['wall_seconds'])


def _rows(out):
  try:
    with open(out / 'metrics.csv') as f:
      return list(csv.DictReader(f))
  except FileNotFoundError:
    return []


def test_a_forked_child_gets_its_own_running_clock():
  parent = timing.running_clock()
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: a new clock with a live watcher thread
    try:
      child = timing.running_clock()
      ok = child is not parent and child._thread.is_alive()  # pylint: disable=protected-access
      os.write(write, b'1' if ok else b'0')
    finally:
      os._exit(0)  # pylint: disable=protected-access
  os.close(write)
  answer = os.read(read, 1)
  os.waitpid(pid, 0)
  assert answer == b'1'
  assert timing.running_clock() is parent
