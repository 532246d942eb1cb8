"""PynamoDB's connections (one per model, a session per thread) read botocore's data files through one loader."""
from __future__ import annotations

import threading

from chalicelib.store import models


def test_model_clients__every_model_and_thread__one_data_loader() -> None:
    before = {m: (m.Meta.table_name, getattr(m.Meta, "host", None), m.Meta.region, m._connection)
              for m in models.ALL_MODELS}
    models.configure(prefix="loader-", host="http://127.0.0.1:9", region="us-east-1")
    try:
        loaders = {id(m._get_connection().connection.session.get_component("data_loader"))
                   for m in models.ALL_MODELS}
        other: list[int] = []
        thread = threading.Thread(target=lambda: other.append(id(
            models.SessionRecord._get_connection().connection.session.get_component("data_loader"))))
        thread.start()
        thread.join()
        assert len(loaders | set(other)) == 1
        # and the clients work: each is built (from the shared loader's models) for its own table
        assert {m._get_connection().connection.client.meta.service_model.service_name
                for m in models.ALL_MODELS} == {"dynamodb"}
    finally:  # as it was: a module's shared stack in this worker may still be using them
        for m, (name, host, region, connection) in before.items():
            m.Meta.table_name, m.Meta.host, m.Meta.region, m._connection = name, host, region, connection
