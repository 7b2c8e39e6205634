package bundle

import (
	"path"
	"slices"
	"strconv"
	"strings"
)

// CacheUnit is the cache unit of a file name: a Numba index and its data files
// (dir/stem.nbi, dir/stem.N.nbc) are one unit, and so is each Triton hash
// directory (…/triton/…/<hash>/…) and each ninja build directory, one
// extension's build.ninja, objects, .so and ninja's log and deps, which
// ninja reads against each other's mtimes (…/torch_extensions/<name>/…,
// FlashInfer's …/cached_ops/<name>/…); any other file is a unit of its own.
func CacheUnit(name string) string {
	parts := strings.Split(name, "/")
	for i := 0; i < len(parts)-1; i++ {
		switch parts[i] {
		case "triton":
			for j := i + 1; j < len(parts)-1; j++ {
				if tritonHash(parts[j]) {
					return strings.Join(parts[:j+1], "/") + "/"
				}
			}
		case "torch_extensions", "cached_ops":
			if i+2 < len(parts) {
				return strings.Join(parts[:i+2], "/") + "/"
			}
		}
	}
	base := path.Base(name)
	switch {
	case strings.HasSuffix(base, ".nbi"):
		return strings.TrimSuffix(name, ".nbi") + ".nb*"
	case strings.HasSuffix(base, ".nbc"):
		s := strings.TrimSuffix(name, ".nbc")
		if k := strings.LastIndexByte(s, '.'); k > len(s)-len(base) {
			if _, err := strconv.Atoi(s[k+1:]); err == nil {
				return s[:k] + ".nb*"
			}
		}
	}
	return name
}

// TritonUnit reports whether unit, a CacheUnit, is a Triton hash
// directory (…/triton/…/<hash>/), not a ninja build directory or a file.
func TritonUnit(unit string) bool {
	parts := strings.Split(unit, "/")
	n := len(parts) - 1 // parts[n] is "" for a directory unit
	return n >= 2 && parts[n] == "" && tritonHash(parts[n-1]) && slices.Contains(parts[:n-1], "triton")
}

// tritonHash reports whether s looks like a Triton cache key (base32 of
// SHA-256, or hex: 32 characters or more of letters and digits).
func tritonHash(s string) bool {
	if len(s) < 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
