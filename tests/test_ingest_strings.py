"""ingest/strings.py: string columns to integer ids, whether a producer dictionary-encoded
them or not, for the file store's counters and the lake's hashes alike."""
from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from slicemeter import store
from slicemeter.ingest.strings import HashedStringIds, StringIds


@pytest.mark.parametrize("kind", [StringIds, HashedStringIds])
def test_plain_and_dictionary_strings_get_the_same_ids(kind):
    con = duckdb.connect()
    store.migrate(con)
    ids = kind(con)
    values = ["pod-a", None, "pod-b", "pod-a"]
    plain = ids.encode(pa.table({"pod": pa.array(values, pa.string()), "x": [1, 2, 3, 4]}))
    encoded = ids.encode(pa.table({"pod": pa.array(values, pa.string()).dictionary_encode(), "x": [1, 2, 3, 4]}))
    assert plain.column_names == ["pod_id", "x"] and plain.schema.field("pod_id").type == kind.id_type
    assert plain.column("pod_id").to_pylist() == encoded.column("pod_id").to_pylist()
    got = plain.column("pod_id").to_pylist()
    assert got[1] is None and got[0] == got[3] != got[2]
    assert sorted(v for _, v in zip(*ids.take_pending().to_pydict().values())) == ["pod-a", "pod-b"]
