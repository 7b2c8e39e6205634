package preset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kbundle/kbundle/launcher"
)

// ChildEnv returns the environment of a warm-up child: base (usually
// os.Environ()) without any launcher variable (launcher.Scrub, the one
// list of them), with the presets' variables for dir set, replacing any
// value base had for them. Every other user variable is kept, in order.
func ChildEnv(base []string, dir string, presets ...*Preset) ([]string, error) {
	vars, err := EnvFor(dir, presets...)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	env := launcher.Scrub(base)
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !set[name] {
			out = append(out, kv)
		}
	}
	return append(out, vars...), nil
}

// Prepare creates dir and every directory the presets point into (pocl,
// for one, ignores a POCL_CACHE_DIR that does not exist), mode 0700 for
// new directories: a compiled-kernel cache is code the user will run.
func Prepare(dir string, presets ...*Preset) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	dirs := []string{abs}
	for _, p := range presets {
		for _, v := range p.AllVars() {
			if v.Dir {
				dirs = append(dirs, v.value(abs))
			}
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating cache directory: %w", err)
		}
	}
	return nil
}

// Exports turns NAME=VALUE pairs into lines for a POSIX shell's eval:
// export NAME=VALUE, VALUE single-quoted (quotes escaped) unless it is
// made only of letters, digits and /._-+:,=@.
func Exports(vars []string) []string {
	out := make([]string, 0, len(vars))
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		out = append(out, "export "+name+"="+shellQuote(value))
	}
	return out
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,=@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RelocateStaged applies every preset's relocation (Preset.RelocateStaged)
// to a copy extracted to staged that will be renamed to dest, in order,
// stopping at the first failure. `kbundle load` and `kbundle extract` call
// it on the staged tree before installing it, so that a failure installs
// nothing.
func RelocateStaged(staged, dest, origin string, presets ...*Preset) error {
	for _, p := range presets {
		if err := p.RelocateStaged(staged, dest, origin); err != nil {
			return err
		}
	}
	return nil
}

// Activate prepares a cache that a bundle packed in origin (its recorded
// metadata "origin") was extracted to at dest: it runs every preset's
// Relocate, then returns the variables that point the frameworks at dest.
// Call it once per node, on the process that extracted, before any
// application process uses dest; it is idempotent.
func Activate(dest, origin string, presets ...*Preset) ([]string, error) {
	abs, err := filepath.Abs(dest)
	if err != nil {
		return nil, err
	}
	for _, p := range presets {
		if err := p.Relocate(abs, origin); err != nil {
			return nil, err
		}
	}
	return EnvFor(abs, presets...)
}
