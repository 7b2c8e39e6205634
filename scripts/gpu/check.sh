#!/usr/bin/env bash
# scripts/gpu/check.sh: kbundle's check on a GPU machine, for the GPU
# frameworks that are installed there (PyTorch with Triton, JAX with CUDA,
# CuPy, numba-cuda; the GPU-only caches of issue 29: FlashInfer's JIT
# modules, DeepGEMM's kernels, vLLM's compile cache, MIOpen's databases on
# ROCm): for each, warm (the program compiles into a fresh
# cache), pack, load to another path, run the program again against the
# loaded copy, and count the cache's hits by the framework's own counters
# (the programs beside this script print them). Issue 18 items 5 and 6:
# the toolchain recorded (kbundle info) and compared (load's warnings),
# and the entries of the node's GPU architecture installed (load --json's
# gpu_arch, skipped_entries).
#
# It builds nothing and needs no MPI: it runs the no-MPI kbundle that
# `make build` writes to bin/kbundle (`go build -o bin/kbundle
# ./cmd/kbundle`), which loads as a job of one rank. One run takes at most
# BUDGET seconds (default 230, under 4 minutes), each framework at most its
# cap (below), every command under timeout(1); a framework not installed
# is skipped, and said (found without importing it: a skip takes about a
# second). A program that can check nothing here (no GPU, an
# architecture the framework does not compile for, no local model for
# vLLM) says "skipped" too: a skip is not a failure.
#
#   scripts/gpu/check.sh [--dry-run] [--only NAME,...]
#
# --dry-run prints what it would run, and checks its inputs (the kbundle
# binary, built without MPI; the programs; timeout and Python), running no
# framework. Environment: KBUNDLE (default bin/kbundle), PYTHON (default
# python3), WORKDIR (default a fresh directory under $TMPDIR), OUT (where
# the summary and each step's output go; default WORKDIR), BUDGET.
#
# On a device machine of the project: `make build` (or the go build above)
# here, then run `scripts/gpu/check.sh` there with bin/ carried (ignored by
# git, it does not travel otherwise); OUT is the folder that comes back.
#
# Exit status: 0 every framework that ran hit every kernel after the load
# (or was skipped), 1 one did not (or failed), 2 an input is missing.
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KBUNDLE=${KBUNDLE:-$repo/bin/kbundle}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-230}
dry=0
only=""

while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1 ;;
	--only) only=$2; shift ;;
	--only=*) only=${1#--only=} ;;
	-h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

# The frameworks: name, preset, program, the module whose presence says
# it is installed (_check.py installed: torch+hip is a ROCm torch), and
# its cap in seconds (all of a framework's steps, the probe included).
# The caps add up to at most 240 s; none has been measured on a GPU yet.
frameworks=(
	"inductor inductor inductor_gpu.py torch 45"
	"jax jax jax_gpu.py jax 25"
	"cupy cupy cupy_gpu.py cupy 15"
	"numba-cuda numba numba_cuda_gpu.py numba.cuda 15"
	"flashinfer flashinfer flashinfer_gpu.py flashinfer 40"
	"deepgemm deepgemm deepgemm_gpu.py deep_gemm 25"
	"vllm vllm vllm_gpu.py vllm 60"
	"miopen miopen miopen_gpu.py torch+hip 15"
)

say() { echo "check: $*"; }
die() { echo "check: $*" >&2; exit 2; }

# Inputs.
[ -x "$KBUNDLE" ] || die "no kbundle at $KBUNDLE: run make build (or go build -o bin/kbundle ./cmd/kbundle) before carrying the tree here, or set KBUNDLE"
command -v timeout >/dev/null || die "no timeout(1)"
command -v "$PYTHON" >/dev/null || die "no $PYTHON: set PYTHON"
kv=$("$KBUNDLE" version --json 2>/dev/null) || die "$KBUNDLE version failed"
case $kv in
*'"mpi": true'* | *'"mpi":true'*) die "$KBUNDLE is built with MPI; this machine has none: use the no-MPI build (go build -o bin/kbundle ./cmd/kbundle)" ;;
esac
total=0
for f in "${frameworks[@]}"; do
	read -r name preset prog module cap <<<"$f"
	[ -f "$here/$prog" ] || die "no program $here/$prog"
	total=$((total + cap))
done
[ -f "$here/_check.py" ] || die "no $here/_check.py"
[ "$total" -le 240 ] || die "the frameworks' caps add up to ${total}s, over 4 minutes"
[ "$BUDGET" -le 240 ] || die "BUDGET=$BUDGET is over 4 minutes"
"$PYTHON" -c 'import ast, sys
for p in sys.argv[1:]:
    ast.parse(open(p).read(), p)' "$here"/*.py || die "a program does not parse"

selected() { [ -z "$only" ] || case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

start=$(date +%s)
left() { echo $((start + BUDGET - $(date +%s))); }

if [ "$dry" = 1 ]; then
	say "dry run: kbundle $KBUNDLE (no MPI), python $PYTHON, budget ${BUDGET}s, caps ${total}s in all"
fi
WORKDIR=${WORKDIR:-}
if [ "$dry" = 0 ]; then
	WORKDIR=${WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/kbundle-gpu-check.XXXXXX")}
	mkdir -p "$WORKDIR"
fi
OUT=${OUT:-${WORKDIR:-/tmp/kbundle-gpu-check}}
[ "$dry" = 1 ] || mkdir -p "$OUT"
summary=$OUT/summary.txt
[ "$dry" = 1 ] || : > "$summary"

# run CAP LOG CMD...: CMD under timeout, its stdout to LOG and its stderr
# to LOG.stderr (dry: printed).
run() {
	local cap=$1 log=$2
	shift 2
	if [ "$dry" = 1 ]; then
		echo "  timeout $cap $*"
		return 0
	fi
	timeout --kill-after=5 "$cap" "$@" >"$log" 2>"$log.stderr"
}

# budget: the seconds the next step may take: what is left of the
# framework's cap (cap, from t0) and of the whole run's BUDGET.
budget() {
	[ "$dry" = 1 ] && { echo "$cap"; return; }
	local l f
	l=$(left)
	f=$((t0 + cap - $(date +%s)))
	[ "$f" -lt "$l" ] && l=$f
	[ "$l" -lt 1 ] && l=1
	echo "$l"
}

status=0
nok=0 nfail=0 nskip=0
for f in "${frameworks[@]}"; do
	read -r name preset prog module cap <<<"$f"
	prog=$here/$prog
	selected "$name" || continue
	if [ "$dry" = 1 ]; then
		say "$name (preset $preset, $module, cap ${cap}s):"
		echo "  (cd $here && timeout 10 $PYTHON _check.py installed $module)"
		w=WORKDIR/$name
	else
		t0=$(date +%s)
		if ! (cd "$here" && timeout 10 "$PYTHON" _check.py installed "$module") >/dev/null 2>&1; then
			say "$name: $module is not installed for $PYTHON: skipped" | tee -a "$summary"
			nskip=$((nskip + 1))
			continue
		fi
		w=$WORKDIR/$name
		mkdir -p "$w"
		chmod 0700 "$w"
		# The programs' own files (vLLM's tiny model) go here, beside the cache.
		export KBUNDLE_CHECK_WORK=$w
	fi
	ok=1
	run "$(budget)" "$OUT/$name-warm.log" "$KBUNDLE" warm --dir "$w/cache" --preset "$preset" -- "$PYTHON" "$prog" || ok=0
	# The program could check nothing here (no GPU, ...): skipped, not failed.
	why=
	[ "$dry" = 1 ] || why=$(sed -n 's/^KBUNDLE_CHECK .*"skipped": "\(.*\)".*/\1/p' "$OUT/$name-warm.log" 2>/dev/null | tail -1)
	if [ -n "$why" ]; then
		say "$name: skipped: $why ($(($(date +%s) - t0))s)" | tee -a "$summary"
		nskip=$((nskip + 1))
		continue
	fi
	[ $ok = 1 ] && { run "$(budget)" "$OUT/$name-pack.log" "$KBUNDLE" pack --dir "$w/cache" -o "$w/cache.kbundle" --preset "$preset" || ok=0; }
	[ $ok = 1 ] && { run "$(budget)" "$OUT/$name-info.txt" "$KBUNDLE" info "$w/cache.kbundle" || ok=0; }
	[ $ok = 1 ] && { run "$(budget)" "$OUT/$name-load.json" "$KBUNDLE" load --bundle "$w/cache.kbundle" --to "$w/loaded" --json || ok=0; }
	if [ "$dry" = 1 ]; then
		echo "  timeout $cap env <the loaded presets' exports for $w/loaded> $PYTHON $prog"
		continue
	fi
	if [ $ok = 1 ]; then
		mapfile -t exports < <("$KBUNDLE" load --bundle "$w/cache.kbundle" --to "$w/loaded" --print-env -q 2>/dev/null | sed -n 's/^export //p')
		run "$(budget)" "$OUT/$name-again.log" env "${exports[@]}" "$PYTHON" "$prog" || ok=0
	fi
	cold=$(grep -h '^KBUNDLE_CHECK ' "$OUT/$name-warm.log" 2>/dev/null | tail -1)
	again=$(grep -h '^KBUNDLE_CHECK ' "$OUT/$name-again.log" 2>/dev/null | tail -1)
	verdict=$("$PYTHON" - "$cold" "$again" "$OUT/$name-load.json" "$ok" <<-'EOF'
		import json, sys
		cold, again, load, ok = sys.argv[1:5]
		def parse(line):
		    try:
		        return json.loads(line.split(" ", 1)[1])
		    except Exception:
		        return None
		c, a = parse(cold), parse(again)
		try:
		    l = json.load(open(load))
		except Exception:
		    l = {}
		g = "gpu_arch %s, %d entries left out; mismatches %s" % (l.get("gpu_arch") or "-", l.get("skipped_entries", 0), [m.get("key") for m in l.get("mismatches", [])])
		if ok != "1" or not c or not a or "skipped" in a:
		    print("FAIL: a step failed or printed no counts (warm %s, again %s); %s" % (c, a, g)); sys.exit()
		# min_hits: where a hit serves many compiled graphs (vLLM's AOT
		# artifact), the program says how few hits prove the load.
		good = c["misses"] > 0 and a["misses"] == 0 and a["hits"] >= a.get("min_hits", c["misses"])
		print("%s: warm-up compiled %d, after the load %d hits, %d misses; %s" % ("ok" if good else "FAIL", c["misses"], a["hits"], a["misses"], g))
	EOF
	)
	say "$name: $verdict ($(($(date +%s) - t0))s)" | tee -a "$summary"
	case $verdict in ok:*) nok=$((nok + 1)) ;; *) status=1; nfail=$((nfail + 1)) ;; esac
done
[ "$dry" = 1 ] && { say "dry run: inputs checked, nothing run"; exit 0; }
say "done in $(($(date +%s) - start))s: $nok ok, $nfail failed, $nskip skipped; summary in $summary" | tee -a "$summary"
exit $status
