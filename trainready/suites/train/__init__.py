"""The train suite: tokens/s, MFU and the time-to-first-step ledger.

`suite.py` judges a case and runs it (`execute`); `plan` plans the cases and each
scenario's spec, `processes` runs the scenarios in fresh processes, `rates` computes
the rates, intervals, speedup and ledger, `profile` the --profile capture; each training process runs `loop` (the training loop), forked
from a warm interpreter by `zygote` where it can; `scenario` is the record a scenario leaves.
"""
