"""The probe (probe.py, argv[1]) against importlib.metadata.version and
the regular expression the probe used before it (torch/version.py's
cuda), in this interpreter: prints {"got": probe's answer, "diff":
[[key, probe's, reference's], ...]}. argv[2]: a JSON list of names to
ask, besides every distribution this interpreter has (each as given,
upper case, and with "-", "_" and "." swapped)."""
import json
import re
import sys
from importlib import metadata

ns = {"__name__": "kbundle_probe"}
with open(sys.argv[1]) as f:
    exec(compile(f.read(), sys.argv[1], "exec"), ns)
names = set(json.loads(sys.argv[2]))
for d in metadata.distributions():
    n = d.metadata["Name"]
    if n:
        names |= {n, n.upper(), n.replace("-", "_"), n.replace("_", "-"), n.replace("-", ".")}
keys = {"k%04d" % i: n for i, n in enumerate(sorted(names))}
want = {k: [n] for k, n in keys.items()}
want["toolchain.torch_cuda"] = []
got = ns["probe"](want)
ref = {"toolchain.python": "%d.%d.%d" % tuple(sys.version_info[:3])}
for k, n in keys.items():
    try:
        v = metadata.version(n)
    except metadata.PackageNotFoundError:
        v = None
    if v:
        ref[k] = v
try:
    import importlib.util
    import os

    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) as f:
            m = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        if m:
            ref["toolchain.torch_cuda"] = m.group(1)
except Exception:
    pass
diff = [[keys.get(k, k), got.get(k), ref.get(k)] for k in sorted(set(got) | set(ref)) if got.get(k) != ref.get(k)]
print(json.dumps({"got": {keys.get(k, k): v for k, v in got.items()}, "diff": diff}))
