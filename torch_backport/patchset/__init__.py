"""The series model: patch files, a base's series, applying them, identifying
a release by its files' content, known defects, and the driver that runs a
mode's plan. Imports infra and download."""
