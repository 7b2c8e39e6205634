# The toolchain probe (hostinfo.ProbeScript, embedded from this file):
# probe(want) is the Python version and the versions of the distributions
# named in want (key -> names, first found first used), and
# torch.version.cuda read from torch/version.py, all without importing a
# framework. Run as a program, it prints probe(json.loads(sys.argv[1]))
# as one JSON object; the Python package runs probe in its own
# interpreter instead (hostinfo.InProcess). It imports nothing but json
# (os and sys are loaded with any Python) where it can: importlib.metadata alone costs a Python start about
# 30 ms, on every node's leader, while MPI starts (issue 31).
import json, os, sys
def _norm(name):
    # PEP 503's normalisation, as importlib.metadata's Prepared: runs of
    # "-", "_" and "." are one "_", lower case.
    out, sep = [], False
    for c in name.lower():
        if c in "-_.":
            if not sep:
                out.append("_")
            sep = True
        else:
            out.append(c)
            sep = False
    return "".join(out)
def _field(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line in ("\n", "\r\n"):
                    break
                if line[:8].lower() == "version:":
                    return line[8:].strip()
    except OSError:
        pass
    return None
def _scan(names):
    # importlib.metadata.version(name) for each of names, as Python 3.10
    # and later find it, without importing importlib.metadata (about 30
    # ms): the first NAME-*.dist-info or NAME*.egg-info, in sys.path order
    # and then the folder's, whose METADATA (else PKG-INFO, else the file
    # itself) says the version. None where sys.path holds a zip or an egg,
    # or a finder of its own may know distributions: importlib.metadata
    # answers there.
    for f in sys.meta_path:
        if getattr(f, "find_distributions", None) and getattr(f, "__module__", "") not in ("_frozen_importlib_external", "importlib._bootstrap_external", "importlib.machinery"):
            return None
    want = {}
    for n in names:
        want.setdefault(_norm(n), []).append(n)
    found = {}
    for root in sys.path:
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        try:
            entries = os.listdir(root or ".")
        except NotADirectoryError:
            return None
        except OSError:
            continue
        for e in entries:
            low = e.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            todo = [n for n in want.get(_norm(low.rpartition(".")[0].partition("-")[0]), ()) if n not in found]
            if not todo:
                continue
            p = os.path.join(root, e)
            v = _field(os.path.join(p, "METADATA"))
            if v is None:
                v = _field(os.path.join(p, "PKG-INFO"))
            if v is None and not os.path.isdir(p):
                v = _field(p)
            for n in todo:
                found[n] = v
        if len(found) == len(names):
            break
    return {n: v for n, v in found.items() if v is not None}
def probe(want):
    out = {"toolchain.python": "%d.%d.%d" % tuple(sys.version_info[:3])}
    names = [n for ns in want.values() for n in ns]
    got = _scan(names)
    if got is None:
        got = {}
        try:
            from importlib import metadata
            for n in names:
                try:
                    got[n] = metadata.version(n)
                except Exception:
                    pass
        except ImportError:
            pass
    for key, ns in want.items():
        for n in ns:
            if got.get(n):
                out[key] = got[n]
                break
    if "toolchain.torch_cuda" in want:
        try:
            import importlib.util
            spec = importlib.util.find_spec("torch")
            if spec and spec.submodule_search_locations:
                with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) as f:
                    for line in f:
                        head, eq, rest = line.partition("=")
                        if line.startswith("cuda") and eq and (len(head) == 4 or not (head[4].isalnum() or head[4] == "_")):
                            rest = rest.strip()
                            end = min((i for i in (rest.find("'", 1), rest.find('"', 1)) if i > 1), default=-1)
                            if rest[:1] in ("'", '"') and end > 1:
                                out["toolchain.torch_cuda"] = rest[1:end]
                            break
        except Exception:
            pass
    return out
if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
