package testutil

import "testing"

func TestTraceOpens(t *testing.T) {
	const p = "/scratch/set/cache.kbundle"
	for _, c := range []struct {
		name, line string
		want       int
	}{
		{"by fd path", `openat(11, "cache.kbundle", O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC) = 12</scratch/set/cache.kbundle>`, 1},
		{"full name, fd path", `openat(AT_FDCWD, "/scratch/set/cache.kbundle", O_RDONLY|O_CLOEXEC) = 7</scratch/set/cache.kbundle>`, 1},
		{"no fd path, base name", `openat(11, "cache.kbundle", O_RDONLY|O_CLOEXEC) = 12`, 1},
		{"no fd path, full name", `openat(AT_FDCWD, "/scratch/set/cache.kbundle", O_RDONLY) = 3`, 1},
		{"O_PATH", `openat(9, "cache.kbundle", O_RDONLY|O_CLOEXEC|O_PATH) = 10</scratch/set/cache.kbundle>`, 0},
		{"failed", `openat(AT_FDCWD, "/scratch/set/cache.kbundle", O_RDONLY) = -1 ENOENT (No such file or directory)`, 0},
		{"another file", `openat(AT_FDCWD, "/scratch/set/cache.kbundle.d", O_RDONLY|O_DIRECTORY) = 5</scratch/set/cache.kbundle.d>`, 0},
		{"another file, no fd path", `openat(AT_FDCWD, "/scratch/set/cache.kbundle.d", O_RDONLY|O_DIRECTORY) = 5`, 0},
	} {
		if n, _ := TraceOpens(c.line+"\n", p); n != c.want {
			t.Errorf("%s: %d opens, want %d", c.name, n, c.want)
		}
	}
}
