"""Renamed `experiments.aadp_fl.fig4`; this alias goes in the next release."""
from experiments import _renamed
_renamed.alias(__name__, __spec__.name)
