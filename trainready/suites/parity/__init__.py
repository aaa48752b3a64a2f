"""The parity suite: models trained tiny on the device against a float64 reference.

`suite.py` runs a case (`execute`); `plan` plans the cases, `models` builds the model,
`engine` trains it, `noise` measures the honest baseline, `verdicts` judges, `rejudge` judges a
failure again, `bisect` places a compiled failure in the compiler stack, `cache` shares CPU runs
between cases, `baseline` compares with another device's run. The suite in full:
docs/suites/parity.md.
"""
