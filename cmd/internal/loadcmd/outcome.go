package loadcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/harvest"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// SchemaVersion is the version of every JSON object kbundle prints
// (`--json`, and kbundle_load's answer): docs/json.md,
// and docs/json-schema.json. Fields are only ever added within a
// version; it would change only with a breaking change, which kbundle
// promises not to make within version 1.
const SchemaVersion = 1

// Outcome is what a load did, in one JSON shape: `kbundle load --json`
// (rank 0, on success) and kbundle_load's answer (every rank). Fields are
// only ever added (docs/json.md, docs/python.md). On success OK is true
// and the summary is filled; otherwise Kind, Reason (lines, without the
// "kbundle: " prefix) and Hint say why. (A failed `kbundle load --json`
// prints the CLI's error object, the same for every command, instead.)
type Outcome struct {
	SchemaVersion int      `json:"schema_version"`
	OK            bool     `json:"ok"`
	Kind          Kind     `json:"kind,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	Hint          string   `json:"hint,omitempty"`
	Dest          string   `json:"dest,omitempty"`
	Bundle        string   `json:"bundle,omitempty"`
	Entries       int      `json:"entries"`
	Bytes         int64    `json:"bytes"`
	RawBytes      int64    `json:"raw_bytes"`
	Nodes         int      `json:"nodes"`
	Ranks         int      `json:"ranks"`
	MPI           bool     `json:"mpi"`
	Leader        bool     `json:"leader"`
	ReadSeconds   float64  `json:"read_seconds"`
	BcastSeconds  float64  `json:"bcast_seconds"`
	ExtractSecs   float64  `json:"extract_seconds"`
	TotalSeconds  float64  `json:"total_seconds"`
	MismatchNodes int      `json:"mismatch_nodes"`
	MismatchKeys  []string `json:"mismatch_keys"`
	// NodeNotes are, in rank order, the nodes that differ from the
	// warm-up machine and how (rank 0; the warnings merge them).
	NodeNotes    []load.NodeNote `json:"node_notes"`
	Presets      []string        `json:"presets"`
	EmptyPresets []string        `json:"empty_presets"` // leaders: named presets the bundle has nothing for
	Env          []string        `json:"env"`
	HeldBytes    int64           `json:"held_bytes"`
	Taken        string          `json:"taken,omitempty"` // the default DEST, held by another user on TakenNodes nodes
	TakenNodes   int             `json:"taken_nodes,omitempty"`
	// ContentDigest is the set's (docs/FORMAT.md, "Content digest");
	// AlreadyNodes the nodes whose DEST already held it unchanged since
	// its install, left as they were; Already whether this node's did
	// (leaders).
	ContentDigest string `json:"content_digest"`
	AlreadyNodes  int    `json:"already_installed_nodes"`
	Already       bool   `json:"already_installed"`
	// MissingSet: no set existed at Bundle (allow-missing); Dest is an
	// empty cache.
	MissingSet bool `json:"missing_set"`
	// Warnings are the lines rank 0 prints, without the "kbundle: "
	// prefix (Warnings).
	Warnings []string `json:"warnings"`
	// The canonical names (docs/json.md, "Canonical names") of fields
	// above, which stay: Path is Bundle, PackedBytes Bytes, Seconds
	// TotalSeconds.
	Path        string  `json:"path,omitempty"`
	PackedBytes int64   `json:"packed_bytes"`
	Seconds     float64 `json:"seconds"`
	// Mismatches (leaders) are this node's differences from the warm-up
	// machine that make the presets' caches miss (docs/presets.md, "What
	// a load compares"), each: key, compare, warmed, here, presets,
	// effects. UnknownNodes is how many nodes could not compare their
	// toolchain (no Python to ask, a package the warm-up had not
	// installed).
	Mismatches   []preset.Miss `json:"mismatches"`
	UnknownNodes int           `json:"toolchain_unknown_nodes"`
	// GPUArch (leaders) is the architecture this node installed the
	// entries of ("" when it saw no GPU: every architecture);
	// SkippedEntries, SkippedBytes and SkippedArchs (leaders) what it left
	// out; SkippedNodes is how many nodes left something out,
	// AllArchNodes how many saw no GPU while the set holds entries of GPU
	// architectures, and installed them all.
	GPUArch        string   `json:"gpu_arch"`
	SkippedEntries int      `json:"skipped_entries"`
	SkippedBytes   int64    `json:"skipped_bytes"`
	SkippedArchs   []string `json:"skipped_archs"`
	SkippedNodes   int      `json:"skipped_nodes"`
	AllArchNodes   int      `json:"all_archs_nodes"`
}

// Loaded is the outcome of a load of bundle that returned sum, in front
// f's words; usingMPI: over MPI.
func Loaded(f Front, sum *load.Summary, bundle string, usingMPI bool) Outcome {
	o := Outcome{
		SchemaVersion: SchemaVersion, OK: true, Dest: sum.Dest, Bundle: bundle, Path: bundle, PackedBytes: sum.Bytes,
		Seconds: sum.Total.Seconds(), Entries: sum.Entries, Bytes: sum.Bytes,
		RawBytes: sum.RawBytes, Nodes: sum.Nodes, Ranks: sum.Ranks, MPI: usingMPI, Leader: sum.Leader,
		ReadSeconds: sum.Read.Seconds(), BcastSeconds: sum.Bcast.Seconds(),
		ExtractSecs: sum.Extract.Seconds(), TotalSeconds: sum.Total.Seconds(),
		MismatchNodes: sum.MismatchNodes, MismatchKeys: orEmpty(sum.MismatchKeys), NodeNotes: notesOrEmpty(sum.Notes),
		Presets: orEmpty(sum.Presets), EmptyPresets: orEmpty(sum.EmptyPresets), Env: orEmpty(sum.Env),
		HeldBytes: sum.Held, Taken: sum.Taken, TakenNodes: sum.TakenNodes,
		ContentDigest: sum.ContentDigest, AlreadyNodes: sum.InstalledNodes, Already: sum.AlreadyInstalled,
		MissingSet: sum.Missing, Warnings: orEmpty(Warnings(f, sum)),
		Mismatches: sum.Misses, UnknownNodes: sum.UnknownNodes,
		GPUArch: sum.GPUArch, SkippedEntries: sum.Skipped, SkippedBytes: sum.SkippedBytes, SkippedArchs: orEmpty(sum.SkippedArchs),
		SkippedNodes: sum.SkippedNodes, AllArchNodes: sum.AllArchNodes,
	}
	if o.Mismatches == nil {
		o.Mismatches = []preset.Miss{}
	}
	return o
}

func notesOrEmpty(n []load.NodeNote) []load.NodeNote {
	if n == nil {
		return []load.NodeNote{}
	}
	return n
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Warnings are the warnings of a load that returned sum, as rank 0
// prints them (each after "kbundle: "), the same words from every front
// end but what to type (f's): a default DEST another user held, named
// presets the bundle has nothing for, nodes that differ from the warm-up
// machine (or could not tell), what the GPU architecture filter left out.
func Warnings(f Front, sum *load.Summary) []string {
	var w []string
	if sum.Missing {
		w = append(w, fmt.Sprintf("no bundle set at %s yet: DEST is an empty cache, so the job compiles its kernels; "+
			"%s at the job's end writes the set", Safe(sum.Bundle), [...]string{CLI: "`kbundle harvest`", Python: "harvest()"}[f]))
	}
	if sum.Taken != "" {
		nodes := "1 node"
		if sum.TakenNodes != 1 {
			nodes = fmt.Sprintf("%d nodes", sum.TakenNodes)
		}
		w = append(w, fmt.Sprintf("warning: %s belongs to another user on %s (made in advance, as if to deny this load); "+
			"loaded into %s instead (the presets' variables point there)", Safe(sum.Taken), nodes, Safe(sum.Dest)))
	}
	if len(sum.EmptyPresets) > 0 && !sum.Missing { // an empty cache has nothing for any preset
		w = append(w, fmt.Sprintf("warning: the bundle has nothing for preset %s: its variables point at an empty directory",
			strings.Join(sum.EmptyPresets, ", ")))
	}
	w = append(w, mismatchWarnings(f, sum)...)
	w = append(w, gpuLines(f, sum)...)
	return w
}

// mismatchWarnings say how nodes differ from the warm-up machine: by the
// presets' rules, one line a difference of rank 0's node, with what the
// framework will do; without a preset that says which framework, the
// keys that differ. Then what rank 0's node could not compare.
func mismatchWarnings(f Front, sum *load.Summary) []string {
	var w []string
	var named []preset.Miss // by a preset's rule
	for _, m := range sum.Misses {
		if len(m.Presets) > 0 {
			named = append(named, m)
		}
	}
	switch nd := sum.MismatchNodes; {
	case nd == 0:
	case len(named) > 0:
		switch {
		case len(sum.Notes) > 0 && sum.Nodes > 1:
			w = append(w, fmt.Sprintf("warning: %s of %d nodes differ from the machine the cache was warmed on in what their caches key on; rank 0's node:",
				Safe(notedHosts(sum.Notes)), sum.Nodes))
		case sum.Nodes > 1:
			w = append(w, fmt.Sprintf("warning: %d of %d nodes differ from the machine the cache was warmed on in what their caches key on; rank 0's node:", nd, sum.Nodes))
		}
		for _, m := range named {
			w = append(w, "warning: "+Safe(m.String()))
		}
	case len(sum.Notes) > 0:
		w = append(w, notesWarnings(sum.Notes)...)
	default:
		what := "a node differs"
		if nd > 1 {
			what = fmt.Sprintf("%d nodes differ", nd)
		}
		detail := ""
		if len(sum.MismatchKeys) > 0 {
			detail = " (rank 0's node: " + Safe(strings.Join(sum.MismatchKeys, "; ")) + ")"
		}
		w = append(w, fmt.Sprintf("warning: %s from the machine the cache was warmed on%s; compiled kernels may miss", what, detail))
	}
	name := [...]string{CLI: "--python PATH or KBUNDLE_PYTHON names the job's interpreter",
		Python: "load_bundle asks the interpreter it runs in: call it from the job's"}[f]
	switch {
	case sum.ToolchainError != "":
		w = append(w, fmt.Sprintf("warning: cannot tell whether Python's packages match the warm-up's: %s (%s)", Safe(sum.ToolchainError), name))
	case len(sum.NotHere) > 0:
		py := ""
		if sum.PythonPath != "" {
			py = " (Python: " + Safe(sum.PythonPath) + ")"
		}
		w = append(w, fmt.Sprintf("warning: cannot compare the warm-up's %s: not found here%s; if the job runs another Python, %s",
			Safe(strings.Join(sum.NotHere, ", ")), py, name))
	case sum.UnknownNodes > 0:
		w = append(w, fmt.Sprintf("warning: %s could not compare their toolchain with the warm-up's (no Python to ask, or a package missing)", plural(sum.UnknownNodes, "node")))
	}
	return w
}

// notesWarnings are one line for each way nodes differ from the warm-up
// machine, the nodes that differ alike merged in hostlist form.
func notesWarnings(notes []load.NodeNote) []string {
	var order []string
	hosts := map[string][]string{}
	for _, n := range notes {
		how := strings.Join(n.Mismatch, "; ")
		if _, ok := hosts[how]; !ok {
			order = append(order, how)
		}
		hosts[how] = append(hosts[how], n.Host)
	}
	var w []string
	for _, how := range order {
		verb := "differs"
		if len(hosts[how]) > 1 {
			verb = "differ"
		}
		w = append(w, fmt.Sprintf("warning: %s %s from the machine the cache was warmed on (%s); compiled kernels may miss",
			Safe(hostlist.Format(hosts[how])), verb, Safe(how)))
	}
	return w
}

// notedHosts are the hosts of notes, in hostlist form.
func notedHosts(notes []load.NodeNote) string {
	var hosts []string
	for _, n := range notes {
		hosts = append(hosts, n.Host)
	}
	return hostlist.Format(hosts)
}

// gpuLines say what the GPU architecture filter did: what rank 0's node
// left out, how many nodes did, and the nodes that saw no GPU.
func gpuLines(f Front, sum *load.Summary) []string {
	all := [...]string{CLI: "--gpu-arch all", Python: "KBUNDLE_GPU_ARCH=all"}[f] + " installs every architecture"
	var w []string
	switch {
	case sum.Skipped > 0:
		line := fmt.Sprintf("installed the kernels of GPU architecture %s (this node's): left out %s (%s) built for %s",
			sum.GPUArch, plural(sum.Skipped, "entry"), HumanBytes(sum.SkippedBytes), strings.Join(sum.SkippedArchs, ", "))
		if sum.SkippedNodes > 1 {
			line += fmt.Sprintf("; %d nodes left out other architectures'", sum.SkippedNodes)
		}
		w = append(w, line+"; "+all)
	case sum.SkippedNodes > 0:
		w = append(w, fmt.Sprintf("%s left out the kernels of other GPU architectures than their own; %s", plural(sum.SkippedNodes, "node"), all))
	}
	if n := sum.AllArchNodes; n > 0 {
		why := "" // Slurm's cause, named under Slurm only (issue 25, U45)
		if os.Getenv("SLURM_JOB_ID") != "" {
			why = " (Slurm's ConstrainDevices hides GPUs from a step without --gres)"
		}
		w = append(w, fmt.Sprintf("no GPU visible to the load on %s%s: "+
			"installed the kernels of every GPU architecture the set holds; %s installs one", plural(n, "node"), why,
			[...]string{CLI: "--gpu-arch ARCH", Python: "KBUNDLE_GPU_ARCH=ARCH"}[f]))
	}
	return w
}

// plural is "1 node", "3 nodes"; "entry" becomes "entries".
func plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	if strings.HasSuffix(one, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(one, "y"))
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// HumanBytes is n in B, KiB, MiB, GiB, as every kbundle message says a
// size.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// NoMPIWarning is the warning of `kbundle load` built without MPI under
// a launcher of size tasks.
func NoMPIWarning(tasks int) string {
	return fmt.Sprintf("warning: this kbundle was built without MPI: each of the %d tasks reads the bundle itself "+
		"(build with `CC=mpicc go build -tags mpi ./cmd/kbundle` to read it once per job)", tasks)
}

// notLoaded is what load_bundle's caller does without strict: go on.
const notLoaded = "not loaded: the application compiles its kernels as usual"

// Kind is a failed load's class, what its caller does about it: the same
// on every rank but Comm. Exit gives `kbundle load`'s status; Python
// raises the exception named.
type Kind string

const (
	Unusable Kind = "unusable" // the bundle: missing, damaged, untrusted, none configured (3; BundleUnusableError)
	Failed   Kind = "failed"   // a node: DEST exists or is unwritable, disk full, the bundle unreadable; nothing installed (1; LoadFailedError)
	Usage    Kind = "usage"    // a bad argument or KBUNDLE_ variable (2; KbundleUsageError)
	Comm     Kind = "mpi"      // MPI or the communicator, on this rank only (1; KbundleMPIError)
)

// Exit is the exit status of kind k (docs/commands/README.md).
func (k Kind) Exit() int {
	switch k {
	case Unusable:
		return 3
	case Usage:
		return 2
	}
	return 1
}

// KindOf classifies err from Resolve, broadcast.Agree or load.Run: the one
// classification of a load's failures for both front ends.
func KindOf(err error) Kind {
	switch {
	case errors.Is(err, ErrUsage), errors.Is(err, bundle.ErrTrustPolicy), errors.Is(err, bundle.ErrNoParent), errors.Is(err, harvest.ErrRefused):
		return Usage
	case IsComm(err):
		return Comm
	case !errors.Is(err, broadcast.ErrNoBundle):
		return Failed // at a node's destination
	case BundleHint(err) != "", errors.Is(err, fs.ErrNotExist):
		return Unusable
	case errors.Is(err, fs.ErrPermission):
		return Failed // the bundle cannot be read by this user: not its fault
	}
	return Unusable
}

// IsComm reports whether err is MPI's or the communicator's (kind Comm),
// for any command.
func IsComm(err error) bool {
	return errors.Is(err, broadcast.ErrComm) || errors.Is(err, mpi.ErrNotInitialized) || errors.Is(err, mpi.ErrThreadLevel) ||
		errors.Is(err, mpi.ErrABI)
}

// Failure is the outcome of a load that failed with err, in front f's
// words: one line a failing node (host, ranks, reason), then what it
// means; the hint apart.
func Failure(f Front, err error) Outcome {
	k := KindOf(err)
	lines := []string{err.Error()}
	if k != Usage && k != Comm {
		lines = Reasons(err)
	}
	if k == Failed && !errors.Is(err, broadcast.ErrNoBundle) {
		lines = append(lines, "nothing was installed on any node")
	}
	o := Outcome{SchemaVersion: SchemaVersion, Kind: k, Reason: strings.Join(lines, "\n"), Hint: Hint(f, err)}
	if f == Python && (k == Unusable || k == Failed) {
		o.Warnings = []string{notLoaded}
	}
	return o
}

// The words of a fix, per front end: the libraries' errors state what is
// wrong (bundle.ErrExist, the path), and the door says what to type.
var (
	// forceHint is a destination that exists (bundle.ErrExist): both ways
	// out, in one line (U23).
	forceHint = [...]string{CLI: "hint: use --force to replace it (only a tree kbundle installed; everything in it is deleted), or choose another destination",
		Python: "hint: pass force=True to replace it (only a tree kbundle installed; everything in it is deleted), or choose another destination"}
	// changedHint is a tree kbundle installed that the job added to
	// (bundle.ErrChanged).
	changedHint = [...]string{CLI: "hint: run `kbundle harvest` first to keep those entries in the set; --force replaces it and loses them",
		Python: "hint: call harvest() first to keep those entries in the set; force=True replaces it and loses them"}
	parentsHint = [...]string{CLI: "hint: create it first, or pass --parents", Python: "hint: create it first, or pass parents=True"}
)

// TrustHint says how the trust variables are written.
const TrustHint = "hint: KBUNDLE_TRUSTED_GROUPS and KBUNDLE_TRUSTED_OWNERS take group and user names or numeric ids, separated by commas or spaces"

// Hint tells how to fix a load's err, in front f's terms, or "".
func Hint(f Front, err error) string {
	dest := map[Front]string{CLI: "DEST", Python: "dest"}[f]
	switch {
	case errors.Is(err, bundle.ErrTrustPolicy):
		return TrustHint
	case errors.Is(err, mpi.ErrThreadLevel):
		return "hint: leave mpi4py.rc.thread_level at its default (\"multiple\") or set it to \"serialized\" before importing mpi4py.MPI"
	case errors.Is(err, mpi.ErrABI):
		return "hint: use the libkbundle built with this MPI's mpicc (the Python package picks it from mpi4py's MPI unless KBUNDLE_LIBRARY says otherwise)"
	case errors.Is(err, mpi.ErrNotInitialized):
		return initHint("load_bundle")
	case errors.Is(err, ErrUsage), errors.Is(err, broadcast.ErrComm), errors.Is(err, bundle.ErrDestination),
		errors.Is(err, bundle.ErrNoSpace), errors.Is(err, context.Canceled):
		return "" // the message says why and what to do, or nothing is to fix
	case errors.Is(err, broadcast.ErrNoBundle): // the bundle's
		switch h := BundleHint(err); {
		case h != "":
			return h
		case errors.Is(err, fs.ErrNotExist):
			// The new way to start, too (U48).
			return MissingHint + [...]string{CLI: ", or start without one: `load --allow-missing` runs the first job cold and its `harvest` writes the set",
				Python: ", or start without one: allow_missing=True runs the first job cold and its harvest() writes the set"}[f]
		case errors.Is(err, fs.ErrPermission):
			return "hint: you cannot read the bundle; check its and its directories' permissions"
		}
		return ""
	case errors.Is(err, bundle.ErrNoParent):
		return parentsHint[f]
	case errors.Is(err, bundle.ErrChanged):
		return changedHint[f]
	case errors.Is(err, bundle.ErrExist):
		return forceHint[f]
	case errors.Is(err, fs.ErrPermission):
		return "hint: the destination is not writable by you; choose another " + dest
	}
	return "hint: the problem is the destination, not the bundle; check " + dest + "'s path, permissions and free space"
}

// initHint is the hint for MPI not initialised when the binding's call
// what (load_bundle, harvest) ran.
func initHint(what string) string {
	return "hint: import mpi4py.MPI (which initialises MPI) before calling " + what
}

// Safe returns s unchanged when it is valid UTF-8 without control,
// format (bidi overrides) or other non-printing characters and does not
// start with a double quote, and Go-quoted otherwise, so that a bundle's
// names and metadata, or a path, can never move the cursor, clear the
// screen, fake a line or reverse text on the terminal of whoever lists
// them.
func Safe(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, `"`) && !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) && r != ' '
	}) {
		return s
	}
	return strconv.Quote(s)
}
