"""Writes cache units for scripts/bench/harvest.sh: gen_units.py DIR PREFIX
UNITS FILES SIZE SEED makes DIR/PREFIX-NNNN/ (Triton-like hash
directories, one cache unit each) of FILES files of SIZE bytes; the same
arguments give the same bytes on every node. Each file is half random
bytes and half a repeated pattern, so that it compresses about 2:1, as
compiled kernels (ELF objects, cubins) roughly do."""
import os
import random
import sys


def main():
    d, prefix, units, files, size, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    rng = random.Random(seed)
    for u in range(units):
        ud = os.path.join(d, "%s-%04d" % (prefix, u))
        os.makedirs(ud, exist_ok=True)
        for f in range(files):
            half = size // 2
            body = rng.randbytes(half) + (b"kernel%04d.%02d " % (u, f)) * (half // 14 + 1)
            with open(os.path.join(ud, "k%02d.bin" % f), "wb") as out:
                out.write(body[:size])


if __name__ == "__main__":
    main()
