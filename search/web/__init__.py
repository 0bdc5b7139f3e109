"""`wherein serve`: a local web app (FastAPI) over an index: search, browse, see the masks.

app.py builds the FastAPI app and its JSON API; files.py reads an indexed image
only while it is still the indexed content; thumbs.py and masks.py keep their
results under INDEX/cache (masks are made on runner.py's one thread, asked-for
ones first); schemas.py ties the API to schemas/*.schema.json.
"""

# Shared by the app and `wherein serve`, whose import must stay light (no FastAPI).
DEFAULT_PREFETCH_MASKS = 4  # about the first row of hits a person sees
