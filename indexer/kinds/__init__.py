"""Media kinds: one module per kind of file (photo, video, ...), found through registry.py.

See base.py for what a kind says, and docs/architecture.md for how to add one.
"""
