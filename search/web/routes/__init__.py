"""The app's routes, one APIRouter per concern; create_app includes them in this order.

pages: the page; status: /api/status; search: /api/search; images: a hit's record,
thumbnail, preview, and the folders; masks: /api/mask; videos: /api/video (byte ranges). Each route takes the app's
WebState as a ``Web`` parameter (state.py) and leaves the work to the library.
"""

from __future__ import annotations

from fastapi import APIRouter

from wherein.search.web.routes import images, masks, pages, search, status, videos

ROUTERS: list[APIRouter] = [
    pages.router,
    status.router,
    search.router,
    images.router,
    masks.router,
    videos.router,
]
