"""Release downloads: pip's settings, the one HTTP transport, the simple index,
ranged reads of a wheel on the index and the release wheels themselves.
Imports only infra."""
