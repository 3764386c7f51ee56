"""A PyTorch checkout: its base, the series commits in its history, and
checkout mode."""
