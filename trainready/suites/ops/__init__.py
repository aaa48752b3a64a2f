"""The ops suite: PyTorch OpInfo operators on the device (suite.py)."""
