"""The installed torch: its files and manifest, its state, --status, the
install mode and its transaction, and the pristine-release probe."""
