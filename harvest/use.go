package harvest

import (
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/preset"
)

// Did the job use its cache (issue 30)? Per node and per preset, the
// harvest counts:
//   - units loaded: the cache units of the install record under the
//     preset's subdirectory of DEST;
//   - units used: those of them read since the install (access times);
//   - entries new: what the job compiled that no unit of the set holds
//     under that name;
//   - entries recompiled: what the set holds and the job compiled again
//     (other bytes, or the same bytes written again), or a new key beside
//     an old one of the same kernel name.
//
// An entry is what the framework compiles once: a Numba overload (one
// .nbc file of a function's index), a Triton kernel (a hash directory), a
// JAX program (a key, without its -atime stamp), a vLLM compiled piece
// (torch_compile_cache/HASH/rank_R_D/PREFIX); for the other presets a
// cache unit (bundle.CacheUnit). The kernel name, for "a new key beside
// an old one", is Triton's group file's (__grp__NAME.json), JAX's key
// without its hash (jit_f of jit_f-HEX), and vLLM's PREFIX in a rank
// directory. The likely cause of a cold cache is then the first rule of
// causeRules (cause.go) that holds.

// A PresetUse is what one node's job did with one preset's cache.
type PresetUse struct {
	// Preset is the preset's name; "" for files under no preset's
	// subdirectory.
	Preset     string `json:"preset"`
	Loaded     int    `json:"units_loaded"`
	Used       int    `json:"units_used"`
	New        int    `json:"entries_new"`
	Recompiled int    `json:"entries_recompiled"`
	// Cause is the likely reason the node's units went unused or were
	// compiled again (nil: the job ran warm, or no rule knows why).
	Cause *Cause `json:"cause,omitempty"`
	moved string // the key-moved reason the counts show (cause.go's moved*)
	wrote bool   // the job wrote a file under the preset's directory
}

// presetOf maps a DEST subdirectory to its preset.
func presetOf(names []string) map[string]*preset.Preset {
	m := map[string]*preset.Preset{}
	for _, p := range preset.Presets() {
		m[topDir(p.Subdir)] = p
	}
	// Presets Presets does not list (the test suite's own) by the name
	// the install record gives.
	if ps, err := preset.ParseList(names...); err == nil {
		for _, p := range ps {
			if _, ok := m[topDir(p.Subdir)]; !ok {
				m[topDir(p.Subdir)] = p
			}
		}
	}
	return m
}

func topDir(name string) string {
	top, _, _ := strings.Cut(name, "/")
	return top
}

// loadedUnits counts the install record's cache units per top
// directory of DEST.
func loadedUnits(rec *bundle.InstallRecord) map[string]int {
	units := map[string]map[string]bool{}
	for _, e := range rec.Entries {
		if e.Kind != bundle.KindFile {
			continue
		}
		top := topDir(e.Name)
		if units[top] == nil {
			units[top] = map[string]bool{}
		}
		units[top][bundle.CacheUnit(e.Name)] = true
	}
	out := map[string]int{}
	for top, u := range units {
		out[top] = len(u)
	}
	return out
}

// setIndex is what the set holds, for telling a new entry from one
// compiled again.
type setIndex struct {
	files   map[string]string // name → digest
	units   map[string]bool
	kernels map[string]bool // "TOP\x00kernel name" → some unit holds it
	vllm    map[string]bool // "hash\x00prefix" and "rank\x00prefix" held
}

func newSetIndex(have map[string]string) *setIndex {
	x := &setIndex{files: have, units: map[string]bool{}, kernels: map[string]bool{}, vllm: map[string]bool{}}
	for n := range have {
		x.units[bundle.CacheUnit(n)] = true
		if k := kernelName(n); k != "" {
			x.kernels[topDir(n)+"\x00"+k] = true
		}
		if h, r, p, ok := vllmPiece(n); ok {
			x.vllm["h\x00"+h+"\x00"+p] = true
			x.vllm["r\x00"+r+"\x00"+p] = true
		}
	}
	return x
}

// kernelName is the kernel a file of a Triton or JAX cache is for ("":
// neither): Triton's __grp__NAME.json (or NAME.json) in its hash
// directory, JAX's key without its hash.
func kernelName(name string) string {
	base := path.Base(name)
	if bundle.TritonUnit(bundle.CacheUnit(name)) {
		switch {
		case strings.HasPrefix(base, "__grp__") && strings.HasSuffix(base, ".json"):
			return "triton:" + strings.TrimSuffix(strings.TrimPrefix(base, "__grp__"), ".json")
		case strings.HasSuffix(base, ".json"):
			return "triton:" + strings.TrimSuffix(base, ".json")
		}
		return ""
	}
	if topDir(name) == "jax" {
		if key := jaxKey(name); key != "" {
			if i := strings.LastIndexByte(key, '-'); i > 0 {
				return "jax:" + key[:i]
			}
		}
	}
	return ""
}

// jaxKey is the JAX cache key a file holds ("": an -atime stamp, which
// JAX rewrites on a hit, or no key): jit_f-HEX of jit_f-HEX-cache.
func jaxKey(name string) string {
	base := path.Base(name)
	if strings.HasSuffix(base, "-atime") {
		return ""
	}
	return strings.TrimSuffix(base, "-cache")
}

// vllmPiece splits vllm/…/torch_compile_cache/HASH/rank_R_D/PREFIX/….
func vllmPiece(name string) (hash, rank, prefix string, ok bool) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		if p == "torch_compile_cache" && i+4 < len(parts) && strings.HasPrefix(parts[i+2], "rank_") {
			return parts[i+1], parts[i+2], parts[i+3], true
		}
	}
	return "", "", "", false
}

// entryOf is the entry file f of a node belongs to, under preset p's
// rules ("": not an entry, only bookkeeping of one).
func entryOf(name string) string {
	switch top := topDir(name); {
	case top == "numba" || strings.HasSuffix(name, ".nbc") || strings.HasSuffix(name, ".nbi"):
		if strings.HasSuffix(name, ".nbc") {
			return name
		}
		if strings.HasSuffix(name, ".nbi") {
			return "" // the index: its overloads are the entries
		}
	case top == "jax":
		if key := jaxKey(name); key != "" {
			return path.Join(path.Dir(name), key)
		}
		return ""
	}
	if h, r, p, ok := vllmPiece(name); ok {
		i := strings.Index(name, "torch_compile_cache/")
		return name[:i] + "torch_compile_cache/" + h + "/" + r + "/" + p
	}
	if path.Base(name) == "last_accessed" {
		return "" // pocl's stamp of a hit
	}
	return bundle.CacheUnit(name)
}

// tally counts, for one node's list, what its job did with each preset
// (presets sorted by name; the files of none last), against the set's
// index x. It also returns the node's entries, new and recompiled, by
// name, for the job's totals.
func tally(l *list, x *setIndex) ([]PresetUse, map[string]bool, map[string]bool) {
	by := map[string]*PresetUse{}
	get := func(top string) *PresetUse {
		if by[top] == nil {
			by[top] = &PresetUse{}
		}
		return by[top]
	}
	for top, n := range l.Loaded {
		get(top).Loaded = n
	}
	for u := range l.Used {
		get(topDir(u)).Used++
	}
	type entry struct {
		changed bool   // a file the set holds was written again
		kernel  string // a kernel name of its files
		old     bool   // a file of it is in the set
	}
	entries := map[string]*entry{}
	for _, f := range l.Files {
		if !f.Kept {
			get(topDir(f.Name)).wrote = true
		}
		e := entryOf(f.Name)
		if e == "" || (f.Kept && !f.Rewritten) {
			continue
		}
		en := entries[e]
		if en == nil {
			en = &entry{}
			entries[e] = en
		}
		if _, ok := x.files[f.Name]; ok {
			en.old, en.changed = true, true
		}
		if x.units[bundle.CacheUnit(f.Name)] && !strings.HasSuffix(e, ".nbc") {
			en.old = true
		}
		if k := kernelName(f.Name); k != "" {
			en.kernel = k
		}
	}
	newE, recE := map[string]bool{}, map[string]bool{}
	for _, e := range slices.Sorted(maps.Keys(entries)) {
		en := entries[e]
		top := topDir(e)
		u := get(top)
		moved := ""
		h, r, p, isV := vllmPiece(e + "/x")
		switch {
		case en.old:
			if strings.HasSuffix(e, ".nbc") && en.changed {
				moved = movedNumba
			}
		case en.kernel != "" && x.kernels[top+"\x00"+en.kernel]:
			moved = movedTriton
			if strings.HasPrefix(en.kernel, "jax:") {
				moved = movedJAX
			}
		case isV && x.vllm["h\x00"+h+"\x00"+p]:
			moved = movedVLLMRank
		case isV && x.vllm["r\x00"+r+"\x00"+p]:
			moved = movedVLLMHash
		default:
			u.New++
			newE[e] = true
			continue
		}
		u.Recompiled++
		recE[e] = true
		if moved != "" && u.moved == "" {
			u.moved = moved
		}
	}
	if l.UsageUnknown != "" {
		for _, u := range by {
			u.Used = u.Loaded // every unit counts as used
		}
	}
	presets := presetOf(l.Presets)
	var out []PresetUse
	for _, top := range slices.Sorted(maps.Keys(by)) {
		u := by[top]
		if p := presets[top]; p != nil {
			u.Preset = p.Name
		} else if u.Loaded == 0 && u.New == 0 && u.Recompiled == 0 {
			continue
		}
		out = append(out, *u)
	}
	// The files of no preset: one line, after the presets'.
	slices.SortStableFunc(out, func(a, b PresetUse) int {
		return strings.Compare(a.Preset, b.Preset)
	})
	var other PresetUse
	kept := out[:0]
	for _, u := range out {
		if u.Preset == "" {
			other.Loaded += u.Loaded
			other.Used += u.Used
			other.New += u.New
			other.Recompiled += u.Recompiled
			continue
		}
		kept = append(kept, u)
	}
	out = kept
	if other.Loaded+other.New+other.Recompiled > 0 {
		out = append(out, other)
	}
	return out, newE, recE
}

// probeNeeded reports whether a leader's list shows a preset whose
// loaded units went unread, or whose files the set held were written
// again: then a cause is looked for, which needs the node's environment
// and toolchain.
func probeNeeded(l *list) bool {
	if l.UsageUnknown != "" {
		return false
	}
	used := map[string]bool{}
	for u := range l.Used {
		used[topDir(u)] = true
	}
	for top, n := range l.Loaded {
		if n > 0 && !used[top] {
			return true
		}
	}
	for _, f := range l.Files {
		if !f.New {
			return true
		}
	}
	return false
}

// probe fills in what a leader knows of its environment for the cause
// rules: the presets' directory variables not passed to this process
// (unset, or naming another directory than DEST's), and, from
// plan.Local, this node's machine and toolchain.
func probe(plan Plan, l *list) {
	if l.Missing || l.NoRecord || !probeNeeded(l) {
		return
	}
	presets := presetOf(l.Presets)
	for top, n := range l.Loaded {
		p := presets[top]
		if p == nil || n == 0 || plan.Getenv == nil {
			continue
		}
		for _, v := range p.Vars {
			if !v.Dir || topDir(v.Value) != top {
				continue
			}
			want := filepath.Join(l.Dest, filepath.FromSlash(v.Value))
			if got := plan.Getenv(v.Name); filepath.Clean(got) != want {
				l.Unpassed = append(l.Unpassed, v.Name)
			}
		}
	}
	slices.Sort(l.Unpassed)
	if plan.Local != nil {
		l.Local = plan.Local(l.Dest)
	}
}

// explain fills each node's report with its presets' counts and likely
// causes, and the summary's verdict, on rank 0: sum.Nodes[i] is
// lists[i]'s (choose). meta is the set's recorded machine and toolchain
// (its base's), read only when a node needs it.
func explain(sum *Summary, lists []*list, have map[string]string, meta func() map[string]string) {
	x := newSetIndex(have)
	allNew, allRec := map[string]bool{}, map[string]bool{}
	var recorded map[string]string
	loaded := 0
	for i := range sum.Nodes {
		sum.Nodes[i].Presets = []PresetUse{}
	}
	for i, l := range lists {
		if i >= len(sum.Nodes) || l.Missing || l.NoRecord || l.Err != "" {
			continue
		}
		uses, n, r := tally(l, x)
		maps.Copy(allNew, n)
		maps.Copy(allRec, r)
		presets := presetOf(l.Presets)
		total := 0
		for j := range uses {
			u := &uses[j]
			total += u.Loaded
			if !troubled(u, l) {
				continue
			}
			if recorded == nil && l.Local != nil && meta != nil {
				recorded = meta()
			}
			u.Cause = findCause(&causeInput{use: u, preset: presets[topOfPreset(presets, u.Preset)], node: l, recorded: recorded})
		}
		loaded = max(loaded, total)
		sum.Nodes[i].Presets = uses
	}
	sum.Verdict = verdict(sum, loaded, len(allNew), len(allRec))
}

func topOfPreset(presets map[string]*preset.Preset, name string) string {
	for top, p := range presets {
		if p.Name == name && name != "" {
			return top
		}
	}
	return ""
}

// troubled reports whether a node's use of a preset needs a cause: its
// units were loaded but none read (with the use known), or it compiled
// again more entries than half the units loaded.
func troubled(u *PresetUse, l *list) bool {
	if u.Loaded == 0 || u.Preset == "" {
		return false
	}
	return u.Used == 0 && l.UsageUnknown == "" || 2*u.Recompiled > u.Loaded
}

// verdict is the job's one line (without "kbundle: "): "cache: warm (47
// of 48 units used; 1 new)", or the first node's cause.
func verdict(sum *Summary, loaded, fresh, again int) string {
	for _, n := range sum.Nodes {
		for _, u := range n.Presets {
			if u.Cause != nil {
				return "cache: " + u.Cause.Verdict
			}
		}
	}
	var extra string
	if fresh > 0 {
		extra += fmt.Sprintf("; %d new", fresh)
	}
	if again > 0 {
		extra += fmt.Sprintf("; %d recompiled", again)
	}
	switch {
	case loaded == 0 && fresh+again == 0:
		return "cache: empty (nothing loaded, nothing compiled into DEST)"
	case loaded == 0:
		return "cache: cold (nothing loaded" + extra + ")"
	case len(sum.UsageUnknown) > 0:
		return fmt.Sprintf("cache: loaded (%s; use unknown: DEST mounted noatime on %s%s)", plural(loaded, "unit"), strings.Join(sum.UsageUnknown, ","), extra)
	}
	return fmt.Sprintf("cache: warm (%d of %s used%s)", min(sum.UnitsUsed, loaded), plural(loaded, "unit"), extra)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// UseReport is the presets' lines of the report: per node (identical
// lines merged, hosts in hostlist form, as the nodes' lines), "numba: 47 of 48
// units used; 1 new, 0 recompiled", with the likely cause where one
// holds. The files of no preset are in the summary only.
func UseReport(s *Summary) []string {
	var rows []hostlist.Row
	for _, n := range s.Nodes {
		for _, u := range n.Presets {
			name := u.Preset
			if name == "" {
				continue
			}
			text := fmt.Sprintf("%s: %d of %s used; %d new, %d recompiled", name, u.Used, plural(u.Loaded, "unit"), u.New, u.Recompiled)
			if n.UsageUnknown != "" {
				text = fmt.Sprintf("%s: %s loaded, use unknown; %d new, %d recompiled", name, plural(u.Loaded, "unit"), u.New, u.Recompiled)
			}
			if u.Cause != nil {
				text += ": " + bundle.Printable(u.Cause.Text)
			}
			rows = append(rows, hostlist.Row{Host: n.Host, First: n.FirstRank, Last: n.LastRank, Text: text})
		}
	}
	return hostlist.Lines(rows)
}
