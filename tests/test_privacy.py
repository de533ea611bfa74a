import math

import dp_accounting
import numpy as np
import pytest

from tffdp import privacy

ORDERS = list(privacy.DEFAULT_ORDERS)


def direct_epsilon(events, delta=1e-5):
  acc = dp_accounting.rdp.RdpAccountant(ORDERS)
  for e in events:
    acc.compose(e)
  return acc.get_epsilon(delta)


def test_heterogeneous_per_client_matches_dp_accounting():
  ledger = privacy.PrivacyLedger(4, 1e-5)
  e1 = privacy.subsampled_gaussian_event(1.0, 0.1, steps=5)
  e2 = privacy.subsampled_gaussian_event(0.7, 0.1, steps=5)
  lap = dp_accounting.LaplaceDpEvent(2.0)
  gauss = privacy.subsampled_gaussian_event(3.0, 1.0)
  ledger.record([0, 1], e1)
  ledger.record([1, 2], e2)
  ledger.record([2], lap)
  ledger.record([0, 2], gauss)
  expected = [direct_epsilon([e1, gauss]), direct_epsilon([e1, e2]),
              direct_epsilon([e2, lap, gauss]), 0.0]
  report = ledger.report()
  np.testing.assert_allclose(report.per_client, expected, rtol=1e-12)
  assert report.max == pytest.approx(max(expected))
  assert report.mean == pytest.approx(np.mean(expected))
  for c in range(4):
    assert ledger.epsilon(c) == pytest.approx(expected[c])


def test_no_guarantee_is_inf_with_reason():
  ledger = privacy.PrivacyLedger(3, 1e-5)
  ledger.record([0, 1, 2], privacy.subsampled_gaussian_event(1.0, 0.5))
  ledger.record_no_guarantee([1], 'noise before clipping: unbounded sensitivity')
  rep = ledger.report()
  assert math.isinf(rep.per_client[1]) and math.isfinite(rep.per_client[0])
  assert rep.reasons == ['noise before clipping: unbounded sensitivity']
  assert math.isinf(rep.max)


def test_epsilon_if_does_not_change_ledger():
  ledger = privacy.PrivacyLedger(2, 1e-5)
  e = privacy.subsampled_gaussian_event(1.1, 0.01, steps=100)
  before = ledger.report().per_client.copy()
  np.testing.assert_allclose(ledger.epsilon_if([0], e), [direct_epsilon([e])])
  np.testing.assert_array_equal(ledger.report().per_client, before)


def test_state_round_trip():
  ledger = privacy.PrivacyLedger(2, 1e-5)
  ledger.record([0], privacy.subsampled_gaussian_event(1.0, 0.1, 3))
  other = privacy.PrivacyLedger(2, 1e-5)
  other.load_state_dict(ledger.state_dict())
  np.testing.assert_array_equal(other.report().per_client, ledger.report().per_client)


def test_calibration_meets_target():
  sigma = privacy.calibrate_noise_multiplier(2.0, 1e-5, 78 / 6000, 1000)
  eps = direct_epsilon([privacy.subsampled_gaussian_event(sigma, 78 / 6000, 1000)])
  assert eps <= 2.0 and eps > 1.99
  eps_lower = direct_epsilon([privacy.subsampled_gaussian_event(sigma * 0.99, 78 / 6000, 1000)])
  assert eps_lower > 2.0


def test_adap_dp_fl_round_counts():
  # The reference: sigma 1.1, q = 78/6000, delta 1e-5, orders 2..64 reach
  # epsilon 2 after about 768 rounds.
  orders = list(range(2, 65))
  def eps(steps):
    acc = dp_accounting.rdp.RdpAccountant(orders)
    acc.compose(privacy.subsampled_gaussian_event(1.1, 78 / 6000, steps))
    return acc.get_epsilon(1e-5)
  ledger = privacy.PrivacyLedger(1, 1e-5, orders=orders)
  ledger.record([0], privacy.subsampled_gaussian_event(1.1, 78 / 6000, 768))
  assert ledger.epsilon(0) == pytest.approx(eps(768))
  assert eps(760) < 2.0 < eps(780)


def test_rounds_within_matches_dp_accounting_step_by_step():
  step = privacy.subsampled_gaussian_event(1.1, 0.02)
  ledger = privacy.PrivacyLedger(3, 1e-5)
  ledger.record([1], privacy.subsampled_gaussian_event(1.1, 0.02, 40))  # a client with history
  ledger.record([2], privacy.subsampled_gaussian_event(0.3, 1.0))  # already past the budget
  def direct_rounds(history):
    acc = dp_accounting.rdp.RdpAccountant(ORDERS)
    for e in history:
      acc.compose(e)
    t = 0
    while True:
      acc.compose(step)
      if acc.get_epsilon(1e-5) > 2.0:
        return t
      t += 1
  expect = [direct_rounds([]),
            direct_rounds([privacy.subsampled_gaussian_event(1.1, 0.02, 40)]), 0]
  assert expect[0] > expect[1] > 0
  np.testing.assert_array_equal(ledger.rounds_within([0, 1, 2], step, 2.0), expect)
  assert ledger.rounds_within([0], step, 2.0, limit=10)[0] == 10  # capped
  assert ledger.rounds_within([0], dp_accounting.NoOpDpEvent(), 2.0, limit=7)[0] == 7
  assert ledger.rounds_within([0], dp_accounting.NonPrivateDpEvent(), 2.0)[0] == 0


@pytest.mark.parametrize('kw', [dict(num_clients=0, delta=1e-5), dict(num_clients=2, delta=0.0),
                                dict(num_clients=2, delta=1.0)])
def test_invalid(kw):
  with pytest.raises(ValueError):
    privacy.PrivacyLedger(**kw)
  with pytest.raises(ValueError, match='noise_multiplier'):
    privacy.subsampled_gaussian_event(-1.0, 0.1)


def test_releases_differ_compares_each_client_s_events():
  gauss = lambda z, q=0.5: dp_accounting.PoissonSampledDpEvent(
      q, dp_accounting.GaussianDpEvent(z))
  declared = [(np.array([0, 1]), gauss(1.2), ''), (np.array([2]), None, 'no noise')]
  # Grouped otherwise, a float32 multiplier, another reason: the same releases.
  same = [(np.array([1]), gauss(float(np.float32(1.2))), ''), (np.array([0]), gauss(1.2), ''),
          (np.array([2]), None, 'noise multiplier is 0')]
  assert privacy.releases_differ(declared, same) is None
  assert privacy.releases_differ(declared, declared) is None
  cases = [
      ([(np.array([0, 1]), gauss(1.2 * 1.001), ''), declared[1]], 'client 0:'),  # sigma
      ([(np.array([0, 1]), gauss(1.2, 0.6), ''), declared[1]], 'client 0:'),     # rate
      ([(np.array([0]), gauss(1.2), ''), declared[1]], 'client 1: declared'),    # missing
      ([declared[0], (np.array([2]), gauss(1.2), '')], 'client 2:'),  # none vs a guarantee
      ([*declared, (np.array([1]), gauss(1.2), '')], 'client 1:'),    # a second release
      ([(np.array([0, 1]), dp_accounting.GaussianDpEvent(1.2), ''), declared[1]],
       'client 0:'),                                                  # another event type
  ]
  for executed, where in cases:
    message = privacy.releases_differ(declared, executed)
    assert message is not None and message.startswith(where), (executed, message)
  assert 'GaussianDpEvent(noise_multiplier=1.2' in privacy.releases_differ(
      declared, cases[0][0])
  # tffdp's own event (a dataclass on dp_accounting's attrs base): compared by its fields.
  ddg = lambda s: privacy.DistributedDiscreteGaussianDpEvent(1.0, s, 3, 8)
  assert privacy.releases_differ([(np.array([0]), ddg(0.5), '')],
                                 [(np.array([0]), ddg(0.5), '')]) is None
  assert 'local_stddev=0.6' in privacy.releases_differ([(np.array([0]), ddg(0.5), '')],
                                                       [(np.array([0]), ddg(0.6), '')])
