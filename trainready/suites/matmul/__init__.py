"""The matmul suite: MFU over real projection shapes (suite.py)."""
