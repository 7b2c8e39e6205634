package preset

// Change is one file a run added, changed or removed in a cache directory
// (warmup.Diff): what a preset's hit-write hook is asked about.
type Change struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`     // size after (0 when removed)
	OldSize int64  `json:"old_size"` // size before (0 when added)
}

// HitWrite reports whether c is only bookkeeping that one of the presets
// (or a preset it includes) writes on a cache hit, not a rebuild: pocl's
// empty last_accessed stamps, JAX's KEY-atime stamps. warmup.Check ignores those.
func HitWrite(presets []*Preset, c Change) bool {
	for _, p := range presets {
		for _, q := range p.closure() {
			if q.hitWrite != nil && q.hitWrite(c) {
				return true
			}
		}
	}
	return false
}

// Refusals returns the substrings of output lines in which one of the
// presets (or a preset it includes) says it found a cache entry but
// refused it and compiled again without rewriting the file; warmup.Check
// watches a run's output for them.
func Refusals(presets []*Preset) []string {
	var out []string
	for _, p := range presets {
		for _, q := range p.closure() {
			out = append(out, q.refusals...)
		}
	}
	return out
}
