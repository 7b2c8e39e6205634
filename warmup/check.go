package warmup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/preset"
)

// ErrNotReused is returned by Check when the check run wrote to its copy of
// the cache: the framework did not reuse what the warm-up stored there.
var ErrNotReused = errors.New("the cache was not reused")

// ErrNothingToCheck is returned by Check when the cache directory holds no
// file, or when nothing would point the check run at the copy (no preset,
// and no variable of the environment names DIR): a run that writes
// nothing into a cache it does not use proves nothing.
var ErrNothingToCheck = errors.New("nothing to check")

// ErrUnpointed is the ErrNothingToCheck of a check given no preset whose
// environment names no variable at the cache directory: nothing would
// point the check run at the copy.
var ErrUnpointed = fmt.Errorf("%w: no preset given and no environment variable names the cache directory", ErrNothingToCheck)

// CheckOptions describe one check run (see Check).
type CheckOptions struct {
	// Dir is the warmed-up cache directory.
	Dir string
	// Bundle is a bundle already packed from Dir (kbundle warm --pack); ""
	// packs Dir into a temporary bundle first.
	Bundle string
	// Exclude is passed to bundle.Pack when Bundle is "".
	Exclude []string
	// Trust is the trust policy Bundle is opened with, as load would.
	Trust *bundle.TrustPolicy
	// Presets are the presets of the warm-up: their variables point the
	// check run at the copy, their relocation is applied to it.
	Presets []*preset.Preset
	// Argv is the command, as for Run.
	Argv []string
	// Env is the base environment (usually os.Environ()): launcher
	// variables are removed and the presets' variables set for the copy,
	// as preset.ChildEnv does.
	Env []string
	// TempDir is where the copy is placed; "" means os.TempDir(). The copy
	// is removed when Check returns.
	TempDir string
	// Stdin, Stdout and Stderr are the check run's; nil means the null
	// device.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// CheckResult is what a check run did to its copy of the cache.
type CheckResult struct {
	// Copy is where the copy was extracted (removed afterwards).
	Copy string
	// Origin is the directory the bundle recorded as its origin.
	Origin string
	// Files is the number of files in the copy before the run.
	Files int
	// Run is the check run's exit status and its delta of Copy.
	Run *Result
	// Written lists the files the run added, Rewritten those it changed,
	// Removed those it deleted, all without the presets' bookkeeping
	// (Ignored).
	Written   []preset.Change
	Rewritten []preset.Change
	Removed   []preset.Change
	Ignored   []preset.Change
	// Refused lists lines of the run's output in which a framework said
	// it refused an entry it found (see preset.Refusals): the file stays,
	// so only the message tells. Up to 10 are kept.
	Refused []string
}

// Reused reports whether the check run succeeded and neither wrote,
// rewrote nor removed anything in the copy beyond the frameworks'
// bookkeeping.
func (r *CheckResult) Reused() bool {
	return r.Run != nil && !r.Run.Failed() && r.Files > 0 && len(r.Refused) == 0 &&
		len(r.Written) == 0 && len(r.Rewritten) == 0 && len(r.Removed) == 0
}

// Report writes what the check found to w as kbundle's "kbundle: " lines:
// one verdict, then (when not reused) the framework's refusals or up to
// limit paths of what was written, rewritten or removed, and a hint.
func (r *CheckResult) Report(w io.Writer, limit int) {
	switch {
	case r.Run == nil: // not run: the error says why
		return
	case r.Run.Failed():
		fmt.Fprintf(w, "kbundle: check: the run against the copy at %s failed (status %d)\n", r.Copy, r.Run.ExitCode)
		return
	case r.Reused():
		extra := ""
		if len(r.Ignored) > 0 {
			extra = fmt.Sprintf("; %d bookkeeping files ignored", len(r.Ignored))
		}
		fmt.Fprintf(w, "kbundle: check: reused: a fresh run against a copy at another path (%s) wrote nothing into its %d files%s\n",
			r.Copy, r.Files, extra)
		return
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "kbundle: check: NOT reused: the framework refused entries it found in the copy at %s:\n", r.Copy)
		for _, l := range r.Refused {
			fmt.Fprintf(w, "kbundle:   %s\n", l)
		}
		fmt.Fprintf(w, "kbundle: hint: the framework compiled again although the entries are there; see docs/presets.md for this framework (JAX on CPUs: jax-ml/jax#38445)\n")
		return
	}
	fmt.Fprintf(w, "kbundle: check: NOT reused: a fresh run against a copy at another path (%s) added %d, rewrote %d and removed %d of its %d files\n",
		r.Copy, len(r.Written), len(r.Rewritten), len(r.Removed), r.Files)
	n := 0
lists:
	for _, l := range []struct {
		what string
		cs   []preset.Change
	}{{"added", r.Written}, {"rewrote", r.Rewritten}, {"removed", r.Removed}} {
		for _, c := range l.cs {
			if n == limit {
				fmt.Fprintf(w, "kbundle:   ...\n")
				break lists
			}
			n++
			size := c.Size
			if l.what == "removed" {
				size = c.OldSize
			}
			fmt.Fprintf(w, "kbundle:   %s %s (%d bytes)\n", l.what, c.Path, size)
		}
	}
	fmt.Fprintf(w, "kbundle: hint: the framework compiled again: its cache key holds something that changed with the move or between the runs (see \"Misses after a move\" in docs/presets.md); a job using this bundle would compile too\n")
}

// makeCopy makes the copy of dir the check runs against, in tmp, as load
// would install it: packed (or o.Bundle), extracted, relocated for the
// presets and prepared.
func makeCopy(ctx context.Context, o *CheckOptions, dir, tmp string) (*CheckResult, error) {
	bpath := o.Bundle
	if bpath == "" {
		bpath = filepath.Join(tmp, "check.kbundle")
		if _, err := bundle.Pack(ctx, dir, bpath, &bundle.PackOptions{
			Exclude: o.Exclude, Preset: preset.Names(o.Presets),
		}); err != nil {
			return nil, fmt.Errorf("check: packing %s: %w", dir, err)
		}
	}
	rc, err := bundle.Open(bpath, &bundle.OpenOptions{Trusted: true, Trust: o.Trust}) // as load opens it
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	defer rc.Close()
	res := &CheckResult{Copy: filepath.Join(tmp, "cache"), Origin: rc.Meta()[bundle.MetaOrigin]}
	if _, err := rc.Extract(ctx, res.Copy, nil); err != nil {
		return nil, fmt.Errorf("check: extracting %s: %w", bpath, err)
	}
	// The copy is the cache as loaded, without kbundle's own mark.
	os.Remove(filepath.Join(res.Copy, bundle.InstalledMarker))
	if res.Origin == "" {
		res.Origin = dir
	}
	for _, p := range o.Presets {
		if err := p.Relocate(res.Copy, res.Origin); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
	}
	if err := preset.Prepare(res.Copy, o.Presets...); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	return res, nil
}

// classify sorts what the check run wrote, rewrote and removed in the
// copy into res, setting aside what the presets write on a hit
// (preset.HitWrite) as Ignored.
func (res *CheckResult) classify(presets []*preset.Preset, d *Delta) {
	for _, l := range []struct {
		from []preset.Change
		to   *[]preset.Change
	}{{d.Added, &res.Written}, {d.Changed, &res.Rewritten}, {d.Removed, &res.Removed}} {
		for _, c := range l.from {
			if preset.HitWrite(presets, c) {
				res.Ignored = append(res.Ignored, c)
			} else {
				*l.to = append(*l.to, c)
			}
		}
	}
}

// Check proves (or disproves) that the frameworks reuse a warmed cache
// once it has moved, as `kbundle load` moves it: it packs Dir (or takes
// Bundle), extracts it to a fresh directory at another path, applies the
// presets' relocation with the bundle's recorded origin, then runs Argv
// again in a fresh process pointed at that copy and compares the copy
// before and after. Nothing written and nothing rewritten means the cache
// was reused; otherwise the result names what was written and Check
// returns ErrNotReused. A framework that refuses an entry without touching
// its file (JAX on XLA:CPU, jax-ml/jax#38445) is caught by its message on
// the run's stderr, also ErrNotReused. A check run that fails is reported in the result
// (Run.Failed) with a nil error. The copy and any temporary bundle are
// removed before Check returns.
func Check(ctx context.Context, o *CheckOptions) (res *CheckResult, err error) {
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return nil, ErrNoCommand
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(o.TempDir, "kbundle-check-")
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = fmt.Errorf("check: removing %s: %w", tmp, rerr)
		}
	}()
	res, err = makeCopy(ctx, o, dir, tmp)
	if err != nil {
		return nil, err
	}
	env, err := preset.ChildEnv(o.Env, res.Copy, o.Presets...)
	if err != nil {
		return nil, err
	}
	// A variable the user set to DIR (or below it) themselves must name
	// the copy too, or the check run would use DIR and prove nothing.
	env, moved := retarget(env, dir, res.Copy)
	if len(o.Presets) == 0 && moved == 0 {
		return res, fmt.Errorf("%w (%s), so the check run could not be pointed at the copy", ErrUnpointed, dir)
	}
	before, err := TakeSnapshot(res.Copy)
	if err != nil {
		return nil, err
	}
	res.Files = len(before)
	if res.Files == 0 {
		return res, fmt.Errorf("%w: the cache is empty", ErrNothingToCheck)
	}
	watch := &refusalWatcher{signs: preset.Refusals(o.Presets)}
	// Only stderr is watched (XLA's log and Python's warnings go there);
	// stdout stays the caller's own file. One writer for both stays one.
	stdout, stderr := o.Stdout, o.Stderr
	if len(watch.signs) > 0 {
		stderr = watch.tee(o.Stderr)
		if o.Stdout != nil && o.Stdout == o.Stderr {
			stdout = stderr
		}
	}
	run, err := Run(ctx, &Options{
		Argv: o.Argv, Env: env, Dir: res.Copy,
		Stdin: o.Stdin, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return nil, err
	}
	res.Run = run
	res.Refused = watch.found()
	if run.Failed() {
		return res, nil
	}
	res.classify(o.Presets, run.Delta)
	if !res.Reused() {
		return res, ErrNotReused
	}
	return res, nil
}

// refusalWatcher passes a run's output through and keeps the lines that
// hold one of signs. Lines are matched whole, split on newlines, however
// the writes cut them.
type refusalWatcher struct {
	signs []string
	mu    sync.Mutex
	lines []string
}

func (r *refusalWatcher) tee(w io.Writer) io.Writer {
	return &lineMatcher{r: r, out: w}
}

func (r *refusalWatcher) found() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines
}

type lineMatcher struct {
	r    *refusalWatcher
	out  io.Writer
	part []byte
}

func (m *lineMatcher) Write(p []byte) (int, error) {
	m.part = append(m.part, p...)
	for {
		i := bytes.IndexByte(m.part, '\n')
		if i < 0 {
			break
		}
		m.match(string(m.part[:i]))
		m.part = m.part[i+1:]
	}
	if len(m.part) > 4096 { // a very long line: match what we have
		m.match(string(m.part))
		m.part = m.part[:0]
	}
	if m.out == nil {
		return len(p), nil
	}
	return m.out.Write(p)
}

func (m *lineMatcher) match(line string) {
	for _, s := range m.r.signs {
		if strings.Contains(line, s) {
			m.r.mu.Lock()
			if len(m.r.lines) < 10 {
				if len(line) > 300 {
					line = line[:300] + "..."
				}
				m.r.lines = append(m.r.lines, strings.TrimSpace(line))
			}
			m.r.mu.Unlock()
			return
		}
	}
}

// retarget rewrites every variable whose value is dir or a path below it,
// alone or as an element of a colon-separated list, to the same place
// under copy. It returns the new environment and how many variables
// changed.
func retarget(env []string, dir, copy string) ([]string, int) {
	out := make([]string, len(env))
	n := 0
	for i, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		parts := strings.Split(val, ":")
		changed := false
		for j, p := range parts {
			if within(p, copy) {
				continue // already the copy (a preset's variable)
			}
			if within(p, dir) {
				parts[j] = copy + p[len(dir):]
				changed = true
			}
		}
		if changed {
			n++
			kv = name + "=" + strings.Join(parts, ":")
		}
		out[i] = kv
	}
	return out, n
}

// within reports whether p is dir or a path below it.
func within(p, dir string) bool {
	if p == dir || dir == string(filepath.Separator) {
		return strings.HasPrefix(p, dir)
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}
