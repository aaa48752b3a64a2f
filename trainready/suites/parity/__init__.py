"""The parity suite: models trained tiny on the device against a float64 reference (suite.py)."""
