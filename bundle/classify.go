package bundle

import "errors"

// Unusable reports whether err says that the bundle itself cannot be used
// (not a bundle, an unknown version, damaged, hostile, too large or
// untrusted), as opposed to a failure of the machine using it (a
// destination that cannot be written, a full disk).
func Unusable(err error) bool {
	for _, s := range []error{ErrFormat, ErrVersion, ErrChecksum, ErrInsecurePath, ErrTooLarge, ErrUntrusted} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
