"""Arithmetic over measured numbers: statistics, the time ledger, MFU, peaks, FLOPs.

No module here imports torch."""
