"""A torchrun worker for test/python's TestTorch* tests: kbundle's
load_bundle and harvest over torch.distributed's gloo group, with mpi4py
blocked. argv: MODE BUNDLE DEST [NEWFILE]; MODE is load, or harvest (load,
then the leaders write NEWFILE under DEST/numba and harvest). Prints one
line "RESULT {json}" a rank: what the call returned or raised, and whether
mpi4py or a libmpi got into the process."""

import json
import os
import sys

import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

dist.init_process_group("gloo")

import kbundle  # noqa: E402

mode, bundle, dest = sys.argv[1:4]
out = {"rank": dist.get_rank()}
# TORCH_PROG_KILL=RANK:SECONDS: that rank kills itself (SIGKILL) so long
# after the start, in the middle of the load (the test's own variable).
kill = os.environ.get("TORCH_PROG_KILL", "")
if kill and int(kill.split(":")[0]) == dist.get_rank():
    import signal
    import threading
    import time

    def die() -> None:
        time.sleep(float(kill.split(":")[1]))
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()
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
with open("/proc/self/maps") as f:
    out["libmpi"] = "libmpi" in f.read()
out["mpi4py"] = "mpi4py" in sys.modules
os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())  # one write: the ranks' lines do not mix
dist.destroy_process_group()
