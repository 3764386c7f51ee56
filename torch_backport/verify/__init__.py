"""--verify: cells that compare compiled results with eager, run in the
target interpreter."""
