"""The flex suite: FlexAttention variants, forward and backward, eager and compiled (suite.py)."""
