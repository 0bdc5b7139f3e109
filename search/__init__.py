"""Query a wherein index: text and image queries, calibrated scores, masks, the CLI."""
