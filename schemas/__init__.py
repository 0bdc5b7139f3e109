"""Shared contracts of wherein: model specs, records and output schemas."""
