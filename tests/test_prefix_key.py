"""The prefix key has one definition (refactx_index.format): the runtime's encoder and the
Spark SQL expression the prefix rows job uses give the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from refactx_index import format as fmt


def test_list_and_array_inputs_encode_alike():
    for tokens in ([], [0], [1, 255, 256, 65535, 2**32 - 1], list(range(40))):
        assert fmt.encode_prefix(tokens) == fmt.encode_prefix(np.array(tokens, dtype=np.int64))
        assert fmt.decode_prefix(fmt.encode_prefix(tokens)).tolist() == tokens
    for bad in ([-1], [2**32]):
        with pytest.raises(ValueError):
            fmt.encode_prefix(bad)
        with pytest.raises(ValueError):
            fmt.encode_prefix(np.array(bad, dtype=np.int64))


def test_byte_order_is_token_order():
    seqs = [[3], [3, 0], [3, 1], [256], [1, 2**31], [2**31]]
    assert sorted(seqs) == sorted(seqs, key=fmt.encode_prefix)


@pytest.mark.spark
def test_spark_sql_expression_matches_the_encoder(spark):
    from pyspark.sql import functions as F

    rows = [([5, 151643, 2**31 - 1, 0, 42],), ([7],), ([],)]
    df = spark.createDataFrame(rows, "token_ids array<int>")
    for depth in (1, 3, 8):
        got = [bytes(r.key) for r in df.select(F.expr(fmt.prefix_key_sql("token_ids", depth)).alias("key")).collect()]
        assert got == [fmt.encode_prefix(r[0][:depth]) for r in rows]
