// Package version holds kbundle's version: the one string that `kbundle
// version` prints, that a bundle's "creator" metadata records (bundle.
// Creator), and that make install and the Python package carry, since
// make links the same scripts/dev/version.sh output into every build. It
// reads nothing but the build information and never fails.
package version

import "runtime/debug"

// linked is set at link time by make build, make install and make wheel:
//
//	-ldflags "-X github.com/kbundle/kbundle/internal/version.linked=VERSION"
var linked string

// String is kbundle's version: the one linked in, else the module version
// it was built as (go install …@v1.2.3), else "devel" with the commit
// when the build recorded it (devel-2e94ddbe12d5), else "devel".
func String() string {
	if linked != "" {
		return linked
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}
