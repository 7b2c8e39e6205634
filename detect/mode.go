package detect

import (
	"errors"
	"fmt"
	"strings"
)

// Mode is how a program uses its compiled-kernel cache. kbundle itself
// acts on no mode; `kbundle detect` prints it, and Go programs that use
// this package may act on it.
type Mode string

// The cache modes.
const (
	ModeWrite  Mode = "write"  // look entries up and store new ones
	ModeRead   Mode = "read"   // look entries up, never store
	ModeBundle Mode = "bundle" // use only what the bundle holds
	ModeOff    Mode = "off"    // do not touch the cache
)

// Modes lists the valid modes, in the order error messages give them.
var Modes = []Mode{ModeWrite, ModeRead, ModeBundle, ModeOff}

// ModeEnv is the variable that overrides the default mode.
const ModeEnv = "KBUNDLE_MODE"

// ErrInvalidMode reports a KBUNDLE_MODE value that is not a Mode.
var ErrInvalidMode = errors.New("invalid cache mode")

// ParseMode parses a mode name; the error lists the valid ones.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if s == string(m) {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrInvalidMode, s, strings.Join(names, ", "))
}

// DefaultMode is the mode for r when KBUNDLE_MODE is unset: bundle for
// an MPI task, write for a plain process.
func DefaultMode(r Result) Mode {
	if r.MPI {
		return ModeBundle
	}
	return ModeWrite
}

// ModeFromEnv returns the mode KBUNDLE_MODE (read through lookup; a nil
// lookup is an empty environment) sets, or DefaultMode(r) when it is unset
// or empty. An invalid value is ErrInvalidMode, naming the variable; it
// says nothing about r, which stays valid.
func ModeFromEnv(lookup func(string) (string, bool), r Result) (Mode, error) {
	v, ok := env(lookup).get(ModeEnv)
	if !ok || v == "" {
		return DefaultMode(r), nil
	}
	m, err := ParseMode(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", ModeEnv, err)
	}
	return m, nil
}

// MayStore reports whether a process with launcher facts r may store new
// cache entries in mode m: in write mode only, and under MPI only on
// rank 0.
func (m Mode) MayStore(r Result) bool {
	return m == ModeWrite && (!r.MPI || r.Rank == 0)
}
