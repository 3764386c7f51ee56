"""What is generated from a release and the series: an overlay, a patched
wheel, a fleet of them and its package index."""
