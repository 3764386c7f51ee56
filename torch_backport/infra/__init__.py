"""Infrastructure every other folder stands on: errors, paths, file writes
(fsio), git, RECORD digests and the release tables. Imports nothing else of
the package."""
