"""The local gateway serves requests on threads; in Lambda one invocation runs at a time per instance.

Chalice keeps the request in one attribute of the app (`app.current_request`), so two requests served at
once by `chalice local` read each other's (aws/chalice#759): the load run saw a user's POST /tasks answered
404 (another caller's agent identity) and 400 (another request's missing body). The local gateway gives
each serving thread its own current request.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import requests
from chalice import Chalice

from scripts.local.api_server import ApiThread


def test_local_gateway__two_requests_at_once__each_view_reads_its_own_request() -> None:
    app = Chalice(app_name="isolation")
    both_inside = threading.Barrier(2, timeout=10)

    @app.route("/who/{name}")
    def who(name: str) -> dict[str, str]:
        both_inside.wait()  # the two requests are inside their views at the same time
        request = app.current_request
        assert request is not None
        return {"name": name, "current_request": request.uri_params["name"]}

    server = ApiThread(app).start()
    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda n: requests.get(f"{server.url}/who/{n}", timeout=15).json(), "ab"))
    finally:
        server.stop()
    assert answers == [{"name": "a", "current_request": "a"}, {"name": "b", "current_request": "b"}]
