# SPDX-License-Identifier: BSD-3-Clause
"""A KV cache compressed chunk by chunk into a .kvcs stream and read back, with kvcore's Python
package: kvcore.compress / decompress for one chunk, kvcore.open for a stream. Exits 0 only when
every decoded chunk is within CacheGen's quantisation error of the original.

    python3 kv_stream.py [PATH]      (default: a temporary file)
"""
import os
import sys
import tempfile

import numpy as np

import kvcore


def main(argv: "list[str]") -> int:
    rng = np.random.default_rng(0)
    kv = rng.standard_normal((2, 4, 600, 8, 64)).astype(np.float16)  # [K|V, layers, tokens, heads, head size]

    data = kvcore.compress(kv[:, :, :256], level=2)
    chunk = kvcore.decompress(data)
    assert chunk.shape == (2, 4, 256, 8, 64) and chunk.dtype == np.float16
    print(f"one chunk: {kv[:, :, :256].nbytes} -> {len(data)} bytes")

    path = argv[1] if len(argv) > 1 else os.path.join(tempfile.mkdtemp(), "cache.kvcs")
    with kvcore.open(path, "wb", chunk_tokens=256, level=2) as w:
        for start in range(0, kv.shape[2], 100):  # tokens arrive in pieces of any size
            w.write(kv[:, :, start:start + 100])
    print(f"stream: {kv.nbytes} -> {os.path.getsize(path)} bytes in {path}")

    worst, token = 0.0, 0
    with kvcore.open(path, "rb") as r:
        for part in r:  # one decoded 256-token chunk at a time
            n = part.shape[2]
            ref = kv[:, :, token:token + n].astype(np.float32)
            worst = max(worst, float(np.abs(part.astype(np.float32) - ref).max() / np.abs(ref).max()))
            token += n
    print(f"read back {token} tokens, worst error {worst:.3f} of the range")
    # level 2 quantises values to 6 bins (2 levels a side): at most 1/4 of a token's range off
    return 0 if token == kv.shape[2] and worst < 0.26 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
