"""Dataset curation over an index: select, label, near-duplicates, outliers, exports.

Each module does one job on an open index and returns ``Hit`` records (extra
fields in ``Hit.extra``), so every command prints through wherein.search.output
and exports through wherein.search.export:

- select.py: every image above a calibrated probability; copy/link the selection;
- labels.py: zero-shot label probabilities for every image, stored in the catalog;
- dupes.py: exact (content hash) and near (embedding) duplicate groups with keepers;
- unique.py: uniqueness = mean cosine distance to the k nearest neighbours;
- masks_at_scale.py: every selected image's mask on Ray into one label export (resumable).
"""
