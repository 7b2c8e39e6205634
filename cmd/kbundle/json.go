package main

// One schema for every command's --json (docs/json.md;
// docs/json-schema.json, which TestJSONSchema holds every command to):
// every object starts with jsonHead; a record that describes a bundle,
// a set, a layer or a tree carries its digests under the canonical names
// (file_digest, content_digest); the same quantity has the same name in
// every command, the older names staying beside it; and a failure under
// --json prints the error object (jsonFailure), which execute writes for
// every command.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/harvest"
)

// schemaVersion is every --json object's schema_version.
const schemaVersion = loadcmd.SchemaVersion

// jsonHead starts every --json object: the schema's version and whether
// the command succeeded. A failure adds why (jsonFailure): the error
// object is a jsonHead alone; status and clean, whose object reports
// what failed, carry both.
type jsonHead struct {
	SchemaVersion int  `json:"schema_version"`
	OK            bool `json:"ok"`
	*jsonFailure
}

// jsonFailure is why a command failed, restic-style: Kind is
// loadcmd.Kind's class (unusable, failed, usage, mpi), Reason the
// message's lines as printed on stderr without "kbundle: ", Hint its
// "hint: ..." line ("" when none) and ExitStatus the process's.
type jsonFailure struct {
	Kind       loadcmd.Kind `json:"kind"`
	Reason     string       `json:"reason"`
	Hint       string       `json:"hint"`
	ExitStatus int          `json:"exit_status"`
}

// okHead is the head of a success.
func okHead() jsonHead { return jsonHead{SchemaVersion: schemaVersion, OK: true} }

// failedHead is the head of a failure that exits code with the final
// message msg (as run prints it after "kbundle: "), of err's kind.
func failedHead(code int, msg string, err error) jsonHead {
	reason, hint := splitMessage(msg)
	if reason == "" {
		reason = fmt.Sprintf("exit status %d", code)
	}
	return jsonHead{SchemaVersion: schemaVersion, jsonFailure: &jsonFailure{
		Kind: kindOf(code, err), Reason: reason, Hint: hint, ExitStatus: code}}
}

// splitMessage splits a final message into its reason (the lines of
// what happened) and its hint (the "hint: ..." lines).
func splitMessage(msg string) (reason, hint string) {
	var what, hints []string
	for _, l := range strings.Split(strings.TrimSpace(msg), "\nkbundle: ") {
		if strings.HasPrefix(l, "hint: ") {
			hints = append(hints, l)
		} else if l != "" {
			what = append(what, l)
		}
	}
	return strings.Join(what, "\n"), strings.Join(hints, "\n")
}

// kinded gives an error its kind where the exit status does not tell it
// (an MPI failure exits 1, as a node's does).
type kinded struct {
	error
	kind loadcmd.Kind
}

func (e kinded) Unwrap() error { return e.error }

// withKind is err (an exit error) of kind k.
func withKind(err error, k loadcmd.Kind) error { return kinded{err, k} }

// kindOf is the kind of a failure that exits code with err: its own
// (withKind), MPI's, else the one the exit status means.
func kindOf(code int, err error) loadcmd.Kind {
	var k kinded
	switch {
	case errors.As(err, &k):
		return k.kind
	case loadcmd.IsComm(err):
		return loadcmd.Comm
	case code == exitUsage:
		return loadcmd.Usage
	case code == exitUnusable:
		return loadcmd.Unusable
	}
	return loadcmd.Failed
}

// metaMuted marks, in the app's Metadata, a process that prints no JSON
// whatever happens: a rank of a collective command (load, harvest) other
// than the speaker, rank 0.
const metaMuted = "json-muted"

// countingWriter counts what went through it: under --json, a command
// that wrote nothing on stdout before failing gets the error object.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// wroteStdout reports whether c's command has written on stdout.
func wroteStdout(c *cli.Context) bool {
	cw, ok := c.App.Writer.(*countingWriter)
	return ok && cw.n > 0
}

// writeFailureJSON writes the error object of a failure that exits code
// with the final message msg, on one line.
func writeFailureJSON(w io.Writer, code int, msg string, err error) error {
	return writeJSONLine(w, failedHead(code, msg, err))
}

// fileDigest formats a whole-file digest, "" for none.
func fileDigest(d bundle.Digest) string {
	if d == (bundle.Digest{}) {
		return ""
	}
	return bundle.FormatDigest(d)
}

// harvestJSON is `kbundle harvest --json`: harvest.Summary's fields
// (kept as they are), then the canonical ones.
type harvestJSON struct {
	jsonHead
	*harvest.Summary
	Path     string       `json:"path"`      // the set (--bundle)
	RawBytes int64        `json:"raw_bytes"` // Bytes
	Written  *writtenJSON `json:"written"`   // the bundle written; null when none
}

// writtenJSON is the bundle a command wrote into a set: harvest's layer
// (or the set's base, when it made the set).
type writtenJSON struct {
	Path          string `json:"path"`
	Base          bool   `json:"base"`
	FileDigest    string `json:"file_digest"`
	ContentDigest string `json:"content_digest"`
	PackedBytes   int64  `json:"packed_bytes"`
}

// writeHarvestJSON prints harvest's summary sum of the set path.
func writeHarvestJSON(c *cli.Context, path string, sum *harvest.Summary) error {
	out := harvestJSON{jsonHead: okHead(), Summary: sum, Path: path, RawBytes: sum.Bytes}
	if sum.Layer != "" {
		out.Written = &writtenJSON{Path: sum.Layer, Base: sum.Base, FileDigest: sum.Digest, ContentDigest: sum.Content,
			PackedBytes: sum.Packed}
	}
	return writeJSONLine(c.App.Writer, out)
}

// mergeJSON is `kbundle merge --json`. Path is the set's base, new
// when layers were folded; its digests are those of the base after the
// merge.
type mergeJSON struct {
	jsonHead
	Path          string   `json:"path"`
	Folded        int      `json:"folded"`
	Removed       []string `json:"removed"`
	ContentDigest string   `json:"content_digest"`
	FileDigest    string   `json:"file_digest"`
	Entries       int      `json:"entries"`
	// With --max-size and --dry-run: what pruning dropped (or would
	// drop), the use record the merge wrote, and whether nothing was.
	DryRun    bool          `json:"dry_run"`
	Prune     *bundle.Prune `json:"prune,omitempty"`
	UseRecord string        `json:"use_record,omitempty"`
}

// writeMergeJSON prints merge's result res for the set path: with
// nothing folded, the base as it is (its index read).
func writeMergeJSON(c *cli.Context, path string, res *bundle.MergeResult, dry bool) error {
	out := mergeJSON{jsonHead: okHead(), Path: res.Path, Folded: res.Folded, Removed: res.Removed, DryRun: dry, Prune: res.Prune, UseRecord: res.UseRecord}
	if out.Removed == nil {
		out.Removed = []string{}
	}
	if out.Path == "" {
		out.Path = path
	}
	if res.Base && !dry {
		out.ContentDigest, out.FileDigest, out.Entries = bundle.FormatDigest(res.Content), fileDigest(res.Digest), res.Entries
	} else if rc, err := bundle.Open(path, nil); err == nil {
		out.ContentDigest, out.FileDigest, out.Entries = bundle.FormatDigest(rc.ContentDigest()), fileDigest(rc.FileDigest()), len(rc.Entries())
		rc.Close()
	}
	return writeJSONLine(c.App.Writer, out)
}
