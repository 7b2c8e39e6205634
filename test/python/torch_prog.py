"""A torchrun worker for test/python's TestTorch* tests: kbundle's
load_bundle and harvest over torch.distributed's gloo group, with mpi4py
blocked. argv: MODE BUNDLE DEST [NEWFILE]; MODE is load, or harvest (load,
then the leaders write NEWFILE under DEST/numba and harvest). Prints one
line "RESULT {json}" a rank: its host, what the call returned or raised,
and whether mpi4py or a libmpi got into the process."""

import json
import os
import socket
import sys
from typing import Optional

import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

dist.init_process_group("gloo")

import kbundle  # noqa: E402

mode, bundle, dest = sys.argv[1:4]
out = {"rank": dist.get_rank(), "host": socket.gethostname()}
# TORCH_PROG_KILL=RANK:SECONDS[:DIR]: that rank kills itself (SIGKILL) so
# long after the start, in the middle of the load, or, with DIR, so long
# after something appears in DIR (the node's staging tree beside DEST);
# it first writes "KILL {json}" (its host, the time) to stderr. The
# test's own variable.
kill = os.environ.get("TORCH_PROG_KILL", "").split(":")
if kill[0] and int(kill[0]) == dist.get_rank():
    import signal
    import threading
    import time

    def die() -> None:
        while len(kill) > 2 and not os.listdir(kill[2]):
            time.sleep(0.01)
        time.sleep(float(kill[1]))
        what = {"rank": dist.get_rank(), "host": socket.gethostname(), "time": time.time()}
        os.write(2, ("KILL " + json.dumps(what) + "\n").encode())
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()
failed: Optional[kbundle.KbundleError] = None
try:
    r = kbundle.load_bundle(dist.group.WORLD, bundle=bundle, dest=dest, timeout=60, strict=True)
    out.update(ok=r.ok, leader=r.leader, nodes=r.nodes, ranks=r.ranks, dest=r.dest)
    if mode == "harvest":
        if r.leader:
            with open(os.path.join(r.dest, "numba", sys.argv[4]), "w") as f:
                f.write(f"compiled on {r.dest}\n")
        h = kbundle.harvest(dist.group.WORLD, timeout=60, strict=True)
        out.update(harvested=h.ok, layer=h.layer or "", files=h.files)
except kbundle.KbundleError as e:
    out.update(ok=False, error=type(e).__name__, message=str(e))
    failed = e
with open("/proc/self/maps") as f:
    out["libmpi"] = "libmpi" in f.read()
out["mpi4py"] = "mpi4py" in sys.modules
os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())  # one write: the ranks' lines do not mix
# TORCH_PROG_RAISE=1: the call's error then ends the worker (exit 1), as in
# a program that does not catch it (the test's own variable). Otherwise
# the worker ends normally: torchrun's agent then waits in its exit
# barrier (300 s) for every other node's agent.
if failed is not None and os.environ.get("TORCH_PROG_RAISE") == "1":
    raise failed
dist.destroy_process_group()
