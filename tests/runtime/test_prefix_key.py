"""The prefix key has one definition (refactx_index.tree.format): its byte order is the token order.
The Spark SQL expression the prefix rows job uses is checked against it in test_prefix_rows.py."""

from __future__ import annotations

import numpy as np
import pytest

from refactx_index.tree import format as fmt
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
