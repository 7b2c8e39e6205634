package preset

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ErrUnknownPreset is returned by Lookup for a name that is not in the table.
var ErrUnknownPreset = errors.New("unknown preset")

// Var is one environment variable a preset sets.
type Var struct {
	// Name is the variable's name, e.g. "NUMBA_CACHE_DIR".
	Name string `json:"name"`
	// Value is the value to set. When Dir is true it is a slash-separated
	// path relative to the cache directory (e.g. "numba"; "." for the
	// directory itself); otherwise it is set literally (e.g. "1").
	Value string `json:"value"`
	// Dir reports whether Value names a path inside the cache directory.
	Dir bool `json:"dir"`
	// Source names the framework's own documentation for the variable.
	Source string `json:"source"`
	// Doc says what the variable does, in one line.
	Doc string `json:"doc"`
}

// Preset describes how to point one framework's compiled-kernel cache at
// a directory. The table is data: see Presets and docs/presets.md.
type Preset struct {
	// Name is the name used with --preset, e.g. "numba".
	Name string `json:"name"`
	// Framework is the human name, e.g. "Numba".
	Framework string `json:"framework"`
	// Subdir is the directory inside DIR that holds this framework's cache,
	// so that several presets can share one DIR.
	Subdir string `json:"subdir"`
	// Vars are the variables this preset sets itself.
	Vars []Var `json:"vars"`
	// Aliases are other names Lookup accepts for this preset (torch for
	// inductor); the bundle records Name.
	Aliases []string `json:"aliases,omitempty"`
	// Includes names presets whose variables (and relocation) this one
	// needs as well: inductor includes triton, pyopencl includes pocl.
	Includes []string `json:"includes,omitempty"`
	// Misses lists what makes the cache miss after a move.
	Misses []string `json:"misses"`
	// Notes are further facts a user needs.
	Notes []string `json:"notes,omitempty"`
	// Writable reports that the framework was measured to fail with a
	// read-only cache (recompiling, failing or hanging). Every loaded copy
	// should be writable; for these it must be.
	Writable bool `json:"writable"`

	// hidden keeps a preset out of Presets (the presets command, shell
	// completion, the list of known names): the test suite's stand-in
	// framework (tack), which Lookup still finds by name.
	hidden bool

	relocate func(dir, dest, origin string) error
	// hitWrite reports whether a file the framework writes (or removes)
	// in its cache on a cache hit is only bookkeeping, not a rebuild (pocl's
	// empty last_accessed stamps). Check ignores those.
	hitWrite func(c Change) bool
	// refusals are substrings of lines the framework prints when it finds
	// a cache entry but refuses it and compiles again without rewriting the
	// file (JAX on XLA:CPU's AOT loader rejection, jax-ml/jax#38445): Check
	// cannot see those in the files, so it watches the run's output.
	refusals []string
	// mergeDB says how a harvest merges the file rel (below Subdir) when
	// it is a database that every node writes in place, record by record
	// rather than one node's copy (MergeDB): "" when it is not.
	mergeDB func(rel string) string
}

// Presets returns the table, sorted by name, without the hidden test
// preset. The returned presets are shared: callers must not modify them.
func Presets() []*Preset {
	out := make([]*Preset, 0, len(table))
	for _, p := range table {
		if !p.hidden {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the preset with the given name or alias
// (case-insensitive).
func Lookup(name string) (*Preset, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, p := range table {
		if p.Name == n || slices.Contains(p.Aliases, n) {
			return p, nil
		}
	}
	names := make([]string, 0, len(table))
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPreset, name, strings.Join(names, ", "))
}

// closure returns p followed by every preset it includes, transitively,
// each once.
func (p *Preset) closure() []*Preset {
	var out []*Preset
	seen := map[string]bool{}
	var walk func(q *Preset)
	walk = func(q *Preset) {
		if seen[q.Name] {
			return
		}
		seen[q.Name] = true
		out = append(out, q)
		for _, n := range q.Includes {
			if inc, err := Lookup(n); err == nil {
				walk(inc)
			}
		}
	}
	walk(p)
	return out
}

// AllVars returns the variables p sets, its included presets' included,
// in order and without duplicates.
func (p *Preset) AllVars() []Var {
	var out []Var
	seen := map[string]bool{}
	for _, q := range p.closure() {
		for _, v := range q.Vars {
			if !seen[v.Name] {
				seen[v.Name] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// Env returns the NAME=VALUE pairs that point the framework at dest (a
// cache directory, made absolute when possible): directory variables name
// paths inside dest, and write mode is on where the framework has one.
// Included presets' variables come too.
func (p *Preset) Env(dest string) []string {
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	vars := p.AllVars()
	out := make([]string, 0, len(vars))
	for _, v := range vars {
		out = append(out, v.Name+"="+v.value(dest))
	}
	return out
}

func (v Var) value(dest string) string {
	if !v.Dir {
		return v.Value
	}
	return filepath.Join(dest, filepath.FromSlash(v.Value))
}

// Relocate fixes up a cache that was packed in origin (the bundle's
// recorded origin, bundle.MetaOrigin) and extracted to dest, for
// frameworks that store absolute paths inside their cache files (Triton's
// __grp__*.json). It is a no-op for most presets and when origin equals
// dest. An empty origin means unknown: paths are then repaired from the
// cache layout where the framework's layout allows it.
func (p *Preset) Relocate(dest, origin string) error {
	return p.RelocateStaged(dest, dest, origin)
}

// RelocateStaged is Relocate for a copy extracted to staged that will be
// renamed to dest afterwards (an all-or-nothing extraction): files are
// read and rewritten in staged, but the paths written into them name dest,
// where the framework will find them. A path under staged is treated as
// one under dest.
func (p *Preset) RelocateStaged(staged, dest, origin string) error {
	for _, q := range p.closure() {
		if q.relocate == nil {
			continue
		}
		if err := q.relocate(staged, dest, origin); err != nil {
			return fmt.Errorf("preset %s: %w", q.Name, err)
		}
	}
	return nil
}

// EnvFor returns the combined environment of several presets for one
// cache directory, each variable once. Two presets giving one variable
// different values is an error.
func EnvFor(dest string, presets ...*Preset) ([]string, error) {
	var out []string
	seen := map[string]string{}
	for _, p := range presets {
		for _, kv := range p.Env(dest) {
			name, _, _ := strings.Cut(kv, "=")
			if prev, ok := seen[name]; ok {
				if prev != kv {
					return nil, fmt.Errorf("presets disagree on %s: %q and %q", name, prev, kv)
				}
				continue
			}
			seen[name] = kv
			out = append(out, kv)
		}
	}
	return out, nil
}

// How a harvest merges a whole-file database's copies (MergeDB).
const (
	MergeSQLite = "sqlite" // a SQLite database: row by row, by each table's unique key
	MergeLines  = "lines"  // MIOpen's text databases: KEY=ID:VALUES;… lines, by KEY and ID
)

// MergeDB says how a harvest merges name, a path relative to a cache
// directory, when it is a whole-file database of one of the named
// presets (or a preset one of them includes; none named: any preset):
// MergeSQLite, MergeLines, or "" (not a database: one node's copy goes).
// Every node writes such a database in place, so each node's copy holds
// records the others lack (docs/presets.md, miopen).
func MergeDB(presets []string, name string) string {
	var ps []*Preset
	for _, n := range presets {
		if p, err := Lookup(n); err == nil {
			ps = append(ps, p.closure()...)
		}
	}
	if len(presets) == 0 {
		ps = table
	}
	for _, p := range ps {
		if rel, ok := strings.CutPrefix(name, p.Subdir+"/"); ok && p.mergeDB != nil {
			if k := p.mergeDB(rel); k != "" {
				return k
			}
		}
	}
	return ""
}
