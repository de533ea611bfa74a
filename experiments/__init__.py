"""Runnable experiment modules: `python -m experiments.<name>` (one per paper artefact)."""
