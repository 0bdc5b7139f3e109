"""Exports: hits as table files, masks as dataset labels, written only where they may go.

- formats.py: the registry of formats (name, suffixes, table or labels, file or
  folder, encoder, finisher); help texts and errors read it. Light: the CLI imports it.
- destination.py: where an export may go and how it is written (atomic replace,
  through a symlink, a stream, standard output); never into the index or an input.
- hits.py: the front door: check_export before the work, write_export, read_export.
- rows.py: csv / jsonl / parquet bytes of hits.
- labels.py + pieces.py: the sharded label writer; coco.py, yolo.py, pngmasks.py encode.

Imports run one way: hits -> labels -> pieces, formats, destination; the codecs
(rows, coco, yolo, pngmasks) import nothing of the front door, and formats imports
them only when a format's encoder is called.
"""
