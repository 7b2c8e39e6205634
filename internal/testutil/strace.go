package testutil

import (
	"path/filepath"
	"regexp"
	"strings"
)

// openRet is a successful open in strace's output: the fd, decorated
// with its path under -y when strace could read it.
var openRet = regexp.MustCompile(`\) = \d+(<[^>]*>)?$`)

// TraceOpens counts the successful opens of path in one strace output
// (strace -ff -y -e trace=open,openat,openat2), for reading or writing:
// O_PATH handles are not opens of the content. An open counts by the
// path -y gives its fd, or, where strace gave the fd no path (it reads
// /proc/PID/fd, which can fail while the machine is loaded), by the name
// it was called with: the full path, or the base name relative to a
// directory descriptor. where lists the lines counted.
func TraceOpens(trace, path string) (n int, where []string) {
	full, base := `"`+path+`"`, `"`+filepath.Base(path)+`"`
	for _, line := range strings.Split(trace, "\n") {
		m := openRet.FindStringSubmatch(line)
		if m == nil || strings.Contains(line, "O_PATH") {
			continue
		}
		if m[1] == "<"+path+">" || m[1] == "" && (strings.Contains(line, full) || strings.Contains(line, base)) {
			n++
			where = append(where, line)
		}
	}
	return n, where
}
