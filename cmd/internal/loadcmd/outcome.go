package loadcmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/mpi"
)

// Outcome is what a load did, in one JSON shape: `kbundle load --json`
// (rank 0, on success) and kbundle_load's answer (every rank). Fields are
// only ever added (docs/usage.md, docs/python.md). On success OK is true
// and the summary is filled; otherwise Kind, Reason (lines, without the
// "kbundle: " prefix) and Hint say why.
type Outcome struct {
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
}

// Loaded is the outcome of a load of bundle that returned sum; usingMPI:
// over MPI.
func Loaded(sum *load.Summary, bundle string, usingMPI bool) Outcome {
	return Outcome{
		OK: true, Dest: sum.Dest, Bundle: bundle, Entries: sum.Entries, Bytes: sum.Bytes,
		RawBytes: sum.RawBytes, Nodes: sum.Nodes, Ranks: sum.Ranks, MPI: usingMPI, Leader: sum.Leader,
		ReadSeconds: sum.Read.Seconds(), BcastSeconds: sum.Bcast.Seconds(),
		ExtractSecs: sum.Extract.Seconds(), TotalSeconds: sum.Total.Seconds(),
		MismatchNodes: sum.MismatchNodes, MismatchKeys: orEmpty(sum.MismatchKeys), NodeNotes: notesOrEmpty(sum.Notes),
		Presets: orEmpty(sum.Presets), EmptyPresets: orEmpty(sum.EmptyPresets), Env: orEmpty(sum.Env),
		HeldBytes: sum.Held, Taken: sum.Taken, TakenNodes: sum.TakenNodes,
		ContentDigest: sum.ContentDigest, AlreadyNodes: sum.InstalledNodes, Already: sum.AlreadyInstalled,
		MissingSet: sum.Missing, Warnings: orEmpty(Warnings(sum)),
	}
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
// end: a default DEST another user held, named presets the bundle has
// nothing for, nodes that differ from the warm-up machine.
func Warnings(sum *load.Summary) []string {
	var w []string
	if sum.Missing {
		w = append(w, fmt.Sprintf("no bundle set at %s yet: DEST is an empty cache, so the job compiles its kernels; "+
			"`kbundle harvest` at the job's end writes the set", Safe(sum.Bundle)))
	}
	if sum.Taken != "" {
		nodes := "1 node"
		if sum.TakenNodes != 1 {
			nodes = fmt.Sprintf("%d nodes", sum.TakenNodes)
		}
		w = append(w, fmt.Sprintf("warning: %s belongs to another user on %s (made in advance, as if to deny this load); "+
			"loaded into %s instead (the presets' variables point there)", Safe(sum.Taken), nodes, Safe(sum.Dest)))
	}
	if len(sum.EmptyPresets) > 0 {
		w = append(w, fmt.Sprintf("warning: the bundle has nothing for preset %s: its variables point at an empty directory",
			strings.Join(sum.EmptyPresets, ", ")))
	}
	if len(sum.Notes) > 0 {
		return append(w, mismatchWarnings(sum.Notes)...)
	}
	if nd := sum.MismatchNodes; nd > 0 {
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
	return w
}

// mismatchWarnings are one line for each way nodes differ from the
// warm-up machine, the nodes that differ alike merged in hostlist form.
func mismatchWarnings(notes []load.NodeNote) []string {
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

// Exit is the exit status of kind k (docs/usage.md).
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
	case errors.Is(err, ErrUsage), errors.Is(err, bundle.ErrTrustPolicy), errors.Is(err, bundle.ErrNoParent):
		return Usage
	case errors.Is(err, broadcast.ErrComm), errors.Is(err, mpi.ErrNotInitialized), errors.Is(err, mpi.ErrThreadLevel),
		errors.Is(err, mpi.ErrABI):
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
	o := Outcome{Kind: k, Reason: strings.Join(lines, "\n"), Hint: Hint(f, err)}
	if f == Python && (k == Unusable || k == Failed) {
		o.Warnings = []string{notLoaded}
	}
	return o
}

// ForceHint is the CLI's hint for a destination that exists. The error
// itself says what --force does (bundle.ErrExist's text): the hint adds
// the other way out, rather than saying it twice (U23).
const ForceHint = "hint: or choose another destination"

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
			return MissingHint
		case errors.Is(err, fs.ErrPermission):
			return "hint: you cannot read the bundle; check its and its directories' permissions"
		}
		return ""
	case errors.Is(err, bundle.ErrNoParent) && f == Python:
		return "hint: create it first, or pass parents=True"
	case errors.Is(err, bundle.ErrNoParent):
		return "hint: create it first, or pass --parents"
	case errors.Is(err, bundle.ErrExist) && f == Python:
		return "hint: pass force=True to replace the destination"
	case errors.Is(err, bundle.ErrExist):
		return ForceHint
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
