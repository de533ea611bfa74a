import numpy as np
import pytest

from tffdp.data import partitioners as P


def labels(n=6000, classes=10, seed=0):
  return np.random.default_rng(seed).integers(0, classes, n)


ALL = [('iid', {}), ('label_skew', {}), ('shards', {'num_shards': 40}),
       ('dirichlet', {'alpha': 0.5}), ('noniid_fraction', {'fraction': 0.5}),
       ('equal', {}), ('random_size', {})]


@pytest.mark.parametrize('name,kw', ALL)
def test_deterministic_and_disjoint(name, kw):
  y = labels()
  a = P.partition(name, y, 10, seed=3, **kw)
  b = P.partition(name, y, 10, seed=3, **kw)
  c = P.partition(name, y, 10, seed=4, **kw)
  assert len(a) == 10
  assert all(np.array_equal(u, v) for u, v in zip(a, b))
  assert any(not np.array_equal(u, v) for u, v in zip(a, c))
  allidx = np.concatenate(a)
  assert len(np.unique(allidx)) == len(allidx)  # at most once
  assert allidx.min() >= 0 and allidx.max() < len(y)


def test_iid_equal_sizes():
  parts = P.iid(labels(), 7)
  assert {len(p) for p in parts} == {6000 // 7}


def test_label_skew_fraction_of_dominant_label():
  y = labels(20000)
  skew = np.linspace(0, 1, 20)
  parts = P.label_skew(y, 20, seed=0, examples_per_client=100, skew=skew)
  for i, p in enumerate(parts):
    assert len(p) == 100
    dominant = np.sum(y[p] == i % 10)
    # round(s*n) from the dominant label, the rest from the other labels only.
    assert dominant == round(skew[i] * 100)


def test_label_skew_zero_lacks_the_dominant_label_and_validates():
  # skew 0 is not IID: every client's examples come from its nine other labels.
  y = labels(20000)
  parts = P.label_skew(y, 10, examples_per_client=200, skew=0.0)
  assert all(np.sum(y[p] == i % 10) == 0 for i, p in enumerate(parts))
  with pytest.raises(ValueError, match='skew'):
    P.label_skew(y, 10, skew=1.5)


def test_shards_count_and_labels():
  y = np.repeat(np.arange(10), 600)
  parts = P.shards(y, 10, seed=1, num_shards=400, shards_per_client=40)
  assert all(len(p) == 40 * 15 for p in parts)
  order = np.argsort(y, kind='stable')
  shard_of = np.empty(len(y), int)
  shard_of[order] = np.arange(len(y)) // 15
  for p in parts:
    assert len(np.unique(shard_of[p])) == 40
  with pytest.raises(ValueError, match='num_shards'):
    P.shards(y, 10, num_shards=20, shards_per_client=3)


def test_dirichlet_small_alpha_is_skewed():
  y = labels(10000)
  skewed = P.dirichlet(y, 10, seed=0, alpha=0.05)
  flat = P.dirichlet(y, 10, seed=0, alpha=1000.0)
  def mean_max_share(parts):
    return np.mean([np.bincount(y[p], minlength=10).max() / max(1, len(p)) for p in parts])
  assert mean_max_share(skewed) > 0.5 > mean_max_share(flat)
  assert sum(map(len, skewed)) == len(y)
  with pytest.raises(ValueError, match='alpha'):
    P.dirichlet(y, 10, alpha=0)


def test_noniid_fraction_extremes():
  y = np.repeat(np.arange(10), 500)
  pure = P.noniid_fraction(y, 10, fraction=1.0)
  assert all(len(np.unique(y[p])) <= 2 for p in pure)
  iid = P.noniid_fraction(y, 10, fraction=0.0)
  assert all(len(np.unique(y[p])) == 10 for p in iid)


def test_random_size_min_and_total():
  y = labels(5000)
  parts = P.random_size(y, 50, seed=0, min_size=10)
  sizes = np.array([len(p) for p in parts])
  assert sizes.min() >= 10 and sizes.sum() == 5000 and sizes.std() > 10


def test_unknown_name_lists_valid():
  with pytest.raises(ValueError, match='label_skew'):
    P.partition('nope', labels(), 5)


def _mean_tv(y, parts, k=10):
  glob = np.bincount(y, minlength=k) / len(y)
  return float(np.mean([0.5 * np.abs(np.bincount(y[p], minlength=k) / len(p) - glob).sum()
                        for p in parts]))


def test_a_dpfl_table2_iid_setting_matches_the_global_label_histogram():
  """Issue 11: Table 2's IID rows (`a_dpfl.common.iid_overrides`) give client label
  histograms within sampling noise of the global one; label skew 0 does not."""
  import argparse
  from experiments.a_dpfl import common as a_dpfl_common
  args = argparse.Namespace(quick=False)
  iid = a_dpfl_common.iid_overrides('mnist', args)
  assert iid['partition'] == 'iid'
  per = iid['partition_options']['examples_per_client']
  assert per == 52   # the label-skew runs' size: floor(0.95 * 55,000 / 1,000)
  y = np.random.default_rng(3).integers(0, 10, 55000)
  parts = P.partition(iid['partition'], y, 1000, seed=0, **iid['partition_options'])
  assert {len(p) for p in parts} == {per}
  # Sampling noise: multinomial draws of the same size from the global histogram.
  rng = np.random.default_rng(4)
  reference = [rng.choice(len(y), per, replace=False) for _ in range(1000)]
  assert _mean_tv(y, parts) < 1.1 * _mean_tv(y, reference)
  # The label-skew clients' dominant label (i mod 10): about 10% of an IID client's
  # examples, none of a skew-0 client's.
  own = lambda ps: float(np.mean([np.mean(y[p] == i % 10) for i, p in enumerate(ps)]))
  assert own(parts) == pytest.approx(0.1, abs=0.01)
  assert own(P.label_skew(y, 1000, skew=0.0, examples_per_client=per)) == 0.0
