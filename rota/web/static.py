"""The dashboard page's own files (rota/web/static/: its scripts and style sheet), served at
`/static/NAME` to a signed-in browser under the page's CSP (`script-src 'self'`, `style-src
'self'`): no inline code, no CDN. Only the files listed here are served."""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

from .api import error_response

TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
FILES = frozenset(
    {"style.css", "app.js", "core.js", "charts.js", "timeline.js", "views.js", "details.js", "overview.js", "limits.js"}
)


@cache
def _source(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def static_file(request: Request) -> Response:
    name: str = request.path_params["name"]
    if name not in FILES:
        return error_response(f"no static file {name!r}", 404)
    kind = TYPES[name[name.rindex(".") :]]
    return Response(_source(name), media_type=kind, headers={"cache-control": "no-cache"})
