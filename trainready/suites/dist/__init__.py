"""The dist suite: which torch.distributed APIs work (suite.py; rank.py runs on each rank)."""
