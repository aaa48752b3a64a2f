"""The pipeline's core: cases, the isolated runner and the store."""
