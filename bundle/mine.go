package bundle

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// maxMine bounds how many directory entries MineTrees reads: /tmp is
// shared, and other users' entries must not make status, clean or a
// harvest long.
const maxMine = 1 << 16

// MineTrees lists the trees named prefix* (load.DestPrefix) that are
// directories of uid (not symlinks), sorted: the trees `kbundle status`
// shows, `kbundle clean --all-mine` considers without a DEST, and a
// harvest looks for its DEST among. Whether
// kbundle installed each is for the caller to check. A parent that does
// not exist holds none.
func MineTrees(prefix string, uid int) ([]string, error) {
	dir, base := filepath.Dir(prefix), filepath.Base(prefix)
	f, err := os.Open(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for read := 0; read < maxMine; {
		names, err := f.Readdirnames(1024)
		read += len(names)
		for _, n := range names {
			if !strings.HasPrefix(n, base) {
				continue
			}
			p := filepath.Join(dir, n)
			fi, err := os.Lstat(p)
			if err != nil || !fi.IsDir() {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
				out = append(out, p)
			}
		}
		if err != nil {
			break
		}
	}
	slices.Sort(out)
	return out, nil
}
