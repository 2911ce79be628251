"""Fitting a run to a device: memory profiles and the choice among them.

    profiles.py    memory profiles (what a model, its optimizer and generation need)
    select.py      ``--profile auto``: the profile that fits the card that is there
"""
