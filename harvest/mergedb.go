package harvest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
	"github.com/zeebo/xxh3"
)

// A whole-file database (preset.MergeDB: MIOpen's kernel cache .ukdb and
// perf-db .udb, SQLite files every node writes in place) is not one
// node's unit: rank 0 receives every node's copy that differs from the
// set's and from a lower rank's, into temporary files, and writes their
// union, record by record, into the layer (docs/presets.md, "miopen").
// The wire does not change: a leader sends what the choice lists, and a
// choice may now list a database that other leaders send too.

// A DBMerge says how the harvest merged one database.
type DBMerge struct {
	Name string `json:"name"`
	// From are the nodes whose copies were merged, lowest rank first
	// ("host (rank N)").
	From    []string `json:"from"`
	Records int64    `json:"records"` // rows of the merged database
	// Added counts the rows the higher ranks' copies added to the lowest
	// rank's; Conflicts the rows of a higher rank's copy whose key a lower
	// rank's holds with other values: the lower rank's row is kept.
	Added     int64 `json:"added"`
	Conflicts int64 `json:"conflicts"`
	// LeftOut are the copies not merged ("host (rank N): why"), such as
	// one that is not a valid SQLite database.
	LeftOut []string `json:"left_out,omitempty"`
	// Fallback, when not "", is why no merge was done: the layer holds
	// one copy, FallbackFrom's, and the other nodes' records are lost.
	Fallback     string `json:"fallback,omitempty"`
	FallbackFrom string `json:"fallback_from,omitempty"`
}

// copyRef is one node's copy of a database: lists[r].Files[i].
type copyRef struct{ r, i int }

// merges are rank 0's databases to merge: name → copies, lowest rank first.
type merges struct {
	copies map[string][]copyRef
	kind   map[string]string // name → preset.MergeSQLite or preset.MergeLines
	names  []string
	dir    string             // temporary directory ("": not made yet)
	stash  map[copyRef]string // a copy received → its temporary file
}

// mergeCopies adds to choice, for each database kind says is one, every
// node's copy that differs from the set's and from the copies taken from
// lower ranks, and returns those with more than one copy. A database
// choose left out for a conflict of names stays out.
func mergeCopies(lists []*list, have map[string]string, sum *Summary, choice [][]int, kind func(string) string) *merges {
	m := &merges{copies: map[string][]copyRef{}, kind: map[string]string{}, stash: map[copyRef]string{}}
	chosen := map[string]bool{}
	for r, c := range choice {
		for _, i := range c {
			chosen[lists[r].Files[i].Name] = true
		}
	}
	skipped := map[string]bool{}
	for _, n := range sum.Nodes {
		for _, s := range n.Skipped {
			skipped[s.Name] = true
		}
	}
	var names []string
	found := map[string][]copyRef{}
	for r, l := range lists {
		for i, f := range l.Files {
			if kind(f.Name) == "" || bundle.CacheUnit(f.Name) != f.Name || skipped[f.Name] || f.Dig == have[f.Name] {
				continue
			}
			if found[f.Name] == nil {
				names = append(names, f.Name)
			}
			found[f.Name] = append(found[f.Name], copyRef{r, i})
		}
	}
	slices.Sort(names)
	for _, n := range names {
		digs := map[string]bool{}
		var take []copyRef
		for _, c := range found[n] {
			f := lists[c.r].Files[c.i]
			if digs[f.Dig] {
				continue
			}
			digs[f.Dig] = true
			take = append(take, c)
			if slices.Contains(choice[c.r], c.i) {
				continue
			}
			choice[c.r] = append(choice[c.r], c.i)
			sum.Nodes[c.r].Chosen++
			if !chosen[n] {
				// The lowest rank's copy was the set's: choose took none.
				chosen[n] = true
				sum.Files++
				sum.Units++
				sum.Bytes += f.Size
			}
		}
		if len(take) > 1 {
			m.copies[n] = take
			m.kind[n] = kind(n)
			m.names = append(m.names, n)
			d := DBMerge{Name: n}
			for _, c := range take {
				d.From = append(d.From, where(lists[c.r]))
			}
			sum.Merged = append(sum.Merged, d)
		}
	}
	return m
}

// of reports whether lists[r].Files[i] is a copy to merge.
func (m *merges) of(lists []*list, r, i int) bool {
	return slices.Contains(m.copies[lists[r].Files[i].Name], copyRef{r, i})
}

// close removes the temporary files.
func (m *merges) close() {
	if m.dir != "" {
		os.RemoveAll(m.dir)
	}
}

// temp returns a new temporary file in m's directory.
func (m *merges) temp() (*os.File, error) {
	if m.dir == "" {
		d, err := os.MkdirTemp("", "kbundle-mergedb-")
		if err != nil {
			return nil, err
		}
		m.dir = d
	}
	return os.CreateTemp(m.dir, "copy-")
}

// keep stores copy c, read from r, in a temporary file, checking that it
// holds the f.Size bytes of digest f.Digest that were listed.
func (m *merges) keep(c copyRef, f File, r io.Reader) error {
	t, err := m.temp()
	if err != nil {
		return err
	}
	defer t.Close()
	h := xxh3.New()
	n, err := io.Copy(io.MultiWriter(t, h), io.LimitReader(r, f.Size))
	if err != nil {
		return err
	}
	if n != f.Size || bundle.Digest(h.Sum128().Bytes()) != f.Digest {
		return fmt.Errorf("%w (a database copy of %d bytes, %d listed)", bundle.ErrChecksum, n, f.Size)
	}
	m.stash[c] = t.Name()
	return t.Close()
}

// keepLocal stores rank 0's own copy.
func (m *merges) keepLocal(c copyRef, dest string, f File, origin string) error {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	r, _, done, err := content(root, f.Name, absDest(dest), origin)
	if err != nil {
		return err
	}
	defer done()
	return m.keep(c, f, r)
}

// keepRemote receives leader r's copy (every byte, as recvFile).
func (m *merges) keepRemote(rr *runReader, c copyRef, f File) error {
	return rr.file(f, func(r io.Reader) error { return m.keep(c, f, r) })
}

// write merges each database's copies and adds the result to w; where
// the merge cannot be done, the lowest rank's valid copy (or, none valid,
// the lowest rank's) goes in its place, and sum says so.
func (m *merges) write(ctx context.Context, w *bundle.Writer, python string, lists []*list, sum *Summary) error {
	for _, n := range m.names {
		d := &sum.Merged[slices.IndexFunc(sum.Merged, func(d DBMerge) bool { return d.Name == n })]
		cs := m.copies[n]
		var paths []string
		mode, mtime := lists[cs[0].r].Files[cs[0].i].Mode, int64(0)
		for _, c := range cs {
			paths = append(paths, m.stash[c])
			mtime = max(mtime, lists[c.r].Files[c.i].Mtime)
		}
		out := filepath.Join(m.dir, "merged-"+fmt.Sprint(len(paths))+"-"+filepath.Base(paths[0]))
		var res *mergeResult
		var err error
		if m.kind[n] == preset.MergeLines {
			res, err = mergeLines(out, paths)
		} else {
			res, err = runMerge(ctx, python, out, paths)
		}
		base := 0
		if res != nil {
			for _, l := range res.LeftOut {
				if l.Copy >= 0 && l.Copy < len(d.From) {
					d.LeftOut = append(d.LeftOut, fmt.Sprintf("%s: %s", d.From[l.Copy], l.Why))
				}
			}
			if res.Base > 0 && res.Base < len(paths) {
				base = res.Base
			}
		}
		if err != nil {
			d.Fallback, d.FallbackFrom = err.Error(), d.From[base]
			out = paths[base]
			c := cs[base]
			mode, mtime = lists[c.r].Files[c.i].Mode, lists[c.r].Files[c.i].Mtime
		} else {
			d.Records, d.Added, d.Conflicts = res.Records, res.Added, res.Conflicts
		}
		if err := addFile(w, n, fs.FileMode(mode), time.Unix(0, mtime), out); err != nil {
			return err
		}
		sum.Bytes -= lists[cs[0].r].Files[cs[0].i].Size
		if fi, err := os.Stat(out); err == nil {
			sum.Bytes += fi.Size()
		}
	}
	return nil
}

// addFile adds the file at p to w as name.
func addFile(w *bundle.Writer, name string, mode fs.FileMode, mtime time.Time, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := xxh3.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return w.CopyFile(name, mode, mtime, size, bundle.Digest(h.Sum128().Bytes()), f)
}

// NoPython begins a DBMerge's Fallback when Plan.Python (or python3 on
// PATH) is not found.
const NoPython = "no Python to merge with"

// mergeResult is what mergeScript prints.
type mergeResult struct {
	Base      int       `json:"base"` // the copy merged into (-1: none valid)
	Records   int64     `json:"records"`
	Added     int64     `json:"added"`
	Conflicts int64     `json:"conflicts"`
	LeftOut   []leftOut `json:"left_out"`
	Error     string    `json:"error"`
}

// leftOut is a copy not merged (its index in the copies), and why.
type leftOut struct {
	Copy int    `json:"copy"`
	Why  string `json:"why"`
}

// mergeScript merges SQLite databases with Python's sqlite3 module.
//
//go:embed mergedb.py
var mergeScript string

// runMerge merges the databases at in (lowest rank first) into out with
// python ("": python3 on PATH). An error says why there is no merged
// database; the result, when not nil, still says which copies were left
// out and which is the lowest rank's valid one.
func runMerge(ctx context.Context, python, out string, in []string) (*mergeResult, error) {
	if python == "" {
		python = "python3"
	}
	exe, err := exec.LookPath(python)
	if err != nil {
		return nil, fmt.Errorf("%s (%s not found)", NoPython, python)
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"-I", "-c", mergeScript, out}, in...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	res := &mergeResult{Base: -1}
	if jerr := json.Unmarshal(b, res); jerr != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if err == nil {
			err = jerr
		}
		return nil, fmt.Errorf("%s could not merge: %v: %s", exe, err, msg)
	}
	if res.Error != "" {
		return res, fmt.Errorf("not merged: %s", res.Error)
	}
	return res, nil
}

// maxTextDB bounds a text database that mergeLines reads (MIOpen's are
// kilobytes to a few megabytes).
const maxTextDB = 256 << 20

// mergeLines merges copies of a MIOpen text database (find-db .ufdb.txt,
// text perf-db .udb.txt; ROCm/MIOpen src/db.cpp, PlainTextDb, and
// src/db_record.cpp, DbRecord::ParseContents and WriteContents): lines
// KEY=ID:VALUES;ID:VALUES…, one a record. A record here is one KEY and
// ID: the lowest rank's valid copy keeps its own, each other copy adds
// those it lacks, and out has each KEY's line, in the order the copies
// first have them, its IDs sorted as MIOpen writes them. Ill-formed lines
// and items are dropped, as MIOpen skips them.
func mergeLines(out string, in []string) (*mergeResult, error) {
	res := &mergeResult{Base: -1}
	var keys []string
	recs := map[string]map[string]string{}
	for k, p := range in {
		b, err := readSmall(p, maxTextDB)
		if err == nil && (bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b)) {
			err = errors.New("not a MIOpen text database (binary data)")
		}
		if err != nil {
			res.LeftOut = append(res.LeftOut, leftOut{k, err.Error()})
			continue
		}
		base := res.Base < 0
		if base {
			res.Base = k
		}
		for line := range strings.Lines(string(b)) {
			key, contents, ok := strings.Cut(strings.TrimRight(line, "\r\n"), "=")
			if !ok || key == "" {
				continue
			}
			rec := recs[key]
			if rec == nil {
				rec = map[string]string{}
				recs[key] = rec
				keys = append(keys, key)
			}
			own := map[string]bool{} // this copy's IDs of key: its first wins
			for item := range strings.SplitSeq(contents, ";") {
				id, values, ok := strings.Cut(item, ":")
				if !ok || id == "" || own[id] {
					continue
				}
				// A CR ends a line of a CRLF file, never a value: one
				// written before the line's end would be read back as
				// the line ending it is (FuzzMergeLines).
				values = strings.TrimRight(values, "\r")
				own[id] = true
				old, held := rec[id]
				switch {
				case !held:
					rec[id] = values
					if !base {
						res.Added++
					}
				case base:
					// A duplicate line of the lowest rank's own: its first holds.
				case old != values:
					res.Conflicts++
				}
			}
		}
	}
	if res.Base < 0 {
		return res, errors.New("not merged: no copy could be read")
	}
	var buf bytes.Buffer
	for _, key := range keys {
		rec := recs[key]
		if len(rec) == 0 {
			continue
		}
		buf.WriteString(key + "=")
		for j, id := range slices.Sorted(maps.Keys(rec)) {
			if j > 0 {
				buf.WriteByte(';')
			}
			buf.WriteString(id + ":" + rec[id])
		}
		buf.WriteByte('\n')
		res.Records += int64(len(rec))
	}
	return res, os.WriteFile(out, buf.Bytes(), 0o600)
}

// readSmall reads the file at p, refusing one above limit bytes.
func readSmall(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d MiB: not merged", limit>>20)
	}
	return b, err
}
