"""`wherein serve`: a local web app (FastAPI) over an index: search, browse, see the masks.

app.py builds the FastAPI app and its JSON API; files.py reads an indexed image
only while it is still the indexed content; thumbs.py and masks.py keep their
results under INDEX/cache; schemas.py ties the API to schemas/*.schema.json.
"""
