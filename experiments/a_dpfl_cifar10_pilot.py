"""Renamed `experiments.a_dpfl.cifar10_pilot`; this alias goes in the next release."""
from experiments import _renamed
_renamed.alias(__name__, __spec__.name)
