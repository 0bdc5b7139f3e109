"""Everything kept under INDEX/cache, and the in-memory cache beside it.

limit.py keeps INDEX/cache under one size limit (least recently used goes first);
thumbs.py makes and keeps resized JPEGs (thumbs/, previews/); vision_store.py keeps
CLIPSeg vision passes on disk (vision/); vision.py holds recent vision passes in
memory. Masks (masks/) are written by the web app's mask service, through the same
limit.
"""
