package loadcmd

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"golang.org/x/sys/unix"
)

// A TreeUse is when a tree's cache units were last read, told by their
// files' access times past the install, as the harvest tells it (issue
// 30): on a noatime mount the use is unknown.
type TreeUse struct {
	Units int `json:"units"` // the cache units installed
	Read  int `json:"read"`  // of them, read since the install
	// Last is the newest read (RFC 3339, UTC; "" when none).
	Last string `json:"last,omitempty"`
	// Unknown says why reads cannot be told ("": they can).
	Unknown string `json:"unknown,omitempty"`
}

// treeUse reads the access times of rec's files in dest (lstat only:
// nothing is read, no access time moves).
func treeUse(dest string, rec *bundle.InstallRecord) *TreeUse {
	u := &TreeUse{}
	units := map[string]bool{}
	read := map[string]bool{}
	installed, terr := time.Parse(time.RFC3339Nano, rec.Installed)
	var st unix.Statfs_t
	switch {
	case unix.Statfs(dest, &st) != nil:
		u.Unknown = "cannot tell how DEST is mounted"
	case st.Flags&unix.ST_NOATIME != 0:
		u.Unknown = "DEST is mounted noatime"
	case terr != nil:
		u.Unknown = "its install record has no install time"
	}
	var last time.Time
	for _, e := range rec.Entries {
		if e.Kind != bundle.KindFile {
			continue
		}
		unit := bundle.CacheUnit(e.Name)
		units[unit] = true
		if u.Unknown != "" {
			continue
		}
		fi, err := os.Lstat(filepath.Join(dest, filepath.FromSlash(e.Name)))
		if err != nil {
			continue
		}
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			if at := time.Unix(s.Atim.Unix()); at.After(installed) {
				read[unit] = true
				if at.After(last) {
					last = at
				}
			}
		}
	}
	u.Units, u.Read = len(units), len(read)
	if !last.IsZero() {
		u.Last = last.UTC().Format(time.RFC3339)
	}
	return u
}
