package preset

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/kbundle/kbundle/bundle"
)

// ParseList resolves preset names; each value may hold several names
// separated by commas or spaces ("numba,pyopencl", "pocl pyopencl"). The
// result is in order, each preset once. Unknown names are reported
// together in one error wrapping ErrUnknownPreset; the known presets are
// still returned with it, so a caller may warn and go on.
func ParseList(values ...string) ([]*Preset, error) {
	var out []*Preset
	var unknown []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, name := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			p, err := Lookup(name)
			if err != nil {
				unknown = append(unknown, fmt.Sprintf("%q", name))
				continue
			}
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	if len(unknown) > 0 {
		return out, fmt.Errorf("%w %s (known: %s)", ErrUnknownPreset, strings.Join(unknown, ", "), knownNames())
	}
	return out, nil
}

func knownNames() string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// PresetsFromMeta returns the presets recorded in a bundle's metadata
// (bundle.MetaPreset, written by `kbundle warm --pack` and `kbundle pack
// --preset`): nil when none is recorded. A name this kbundle does not know
// (a bundle from a newer one) gives an error wrapping ErrUnknownPreset
// together with the presets it does know.
func PresetsFromMeta(meta map[string]string) ([]*Preset, error) {
	v := strings.TrimSpace(meta[bundle.MetaPreset])
	if v == "" {
		return nil, nil
	}
	ps, err := ParseList(v)
	if err != nil {
		return ps, fmt.Errorf("bundle metadata %q: %w", bundle.MetaPreset, err)
	}
	return ps, nil
}

// Choose is the one rule for the presets a load or extract applies:
// the bundle's recorded ones (meta), then those asked for by name that
// are not among them; with replace, only those asked for (none: none).
func Choose(asked []*Preset, replace bool, meta map[string]string) ([]*Preset, error) {
	if replace {
		return asked, nil
	}
	rec, err := PresetsFromMeta(meta)
	if err != nil {
		return nil, err
	}
	out := append([]*Preset{}, rec...)
	for _, p := range asked {
		dup := false
		for _, r := range rec {
			dup = dup || r.Name == p.Name
		}
		if !dup {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// MissingContent returns the presets whose own subdirectories hold no
// regular file in fsys: the extracted cache (os.DirFS(dest)) or the bundle
// itself (a *bundle.Reader is an fs.FS). Included presets are not
// required (inductor on a CPU writes nothing under triton/). `kbundle load
// --preset X` on a bundle with no X/ content warns with these: the warm-up
// ran another framework, or the variable was not honoured.
func MissingContent(fsys fs.FS, presets []*Preset) ([]*Preset, error) {
	var out []*Preset
	for _, p := range presets {
		has, err := hasContent(fsys, p)
		if err != nil {
			return nil, err
		}
		if !has {
			out = append(out, p)
		}
	}
	return out, nil
}

var errFound = errors.New("found")

func hasContent(fsys fs.FS, p *Preset) (bool, error) {
	for _, v := range p.Vars {
		if !v.Dir {
			continue
		}
		root := strings.Trim(v.Value, "/")
		if root == "" {
			root = "."
		}
		err := fs.WalkDir(fsys, root, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				return errFound
			}
			return nil
		})
		switch {
		case errors.Is(err, errFound):
			return true, nil
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return false, err
		}
	}
	return false, nil
}

// Names returns the presets' names joined by commas, as recorded in
// a bundle's "preset" metadata (bundle.MetaPreset).
func Names(ps []*Preset) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ",")
}
