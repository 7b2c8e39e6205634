package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/kbundle/kbundle/load"
)

// maxMine bounds how many directory entries minePrefix reads: /tmp is
// shared, and other users' entries must not make status or clean long.
const maxMine = 1 << 16

// minePrefix is the pattern of the default DEST's siblings of user: every
// default DEST of theirs, of any job, is named so (load.Dest).
func minePrefix(user string) string {
	return load.DestPrefix(os.Getenv("TMPDIR"), user)
}

// mineTrees lists the default DEST's siblings of user that are
// directories of uid (not symlinks), sorted: the trees `kbundle status`
// shows and `kbundle clean --all-mine` considers without a DEST. Whether
// kbundle installed each is for the caller to check. A parent that does
// not exist holds none.
func mineTrees(user string, uid int) ([]string, error) {
	prefix := minePrefix(user)
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
	sort.Strings(out)
	return out, nil
}
