"""The train suite: tokens/s, MFU and the time-to-first-step ledger (suite.py)."""
