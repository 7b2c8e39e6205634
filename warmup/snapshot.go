package warmup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/kbundle/kbundle/preset"
)

// FileState is what a snapshot records of one file.
type FileState struct {
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
}

// Snapshot maps slash-separated paths relative to the snapshot's root to
// the state of each regular file and symbolic link below it. Directories
// are not recorded: a cache's content is its files.
type Snapshot map[string]FileState

// Bytes returns the total size of the files in s.
func (s Snapshot) Bytes() int64 {
	var n int64
	for _, f := range s {
		n += f.Size
	}
	return n
}

// TakeSnapshot walks dir and records its files. A missing dir is an empty
// snapshot. Paths listed in skip (absolute or relative to dir, e.g. the
// bundle being written into dir) are left out. Files that vanish during
// the walk are ignored: caches are written concurrently.
func TakeSnapshot(dir string, skip ...string) (Snapshot, error) {
	s := Snapshot{}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	skipSet := map[string]bool{}
	for _, p := range skip {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		if a, err := filepath.Abs(p); err == nil {
			skipSet[a] = true
		}
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if skipSet[path] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil // sockets, fifos: not cache content
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		s[filepath.ToSlash(rel)] = FileState{Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", dir, err)
	}
	return s, nil
}

// Delta is what happened to a directory between two snapshots.
type Delta struct {
	Added   []preset.Change `json:"added"`
	Changed []preset.Change `json:"changed"`
	Removed []preset.Change `json:"removed"`
	// AddedBytes, ChangedBytes (size after) and RemovedBytes (size before).
	AddedBytes   int64 `json:"added_bytes"`
	ChangedBytes int64 `json:"changed_bytes"`
	RemovedBytes int64 `json:"removed_bytes"`
	// TotalFiles and TotalBytes describe the directory afterwards.
	TotalFiles int   `json:"total_files"`
	TotalBytes int64 `json:"total_bytes"`
}

// Diff compares two snapshots. A file is changed when its size, mode or
// modification time differs. Each list is sorted by path.
func Diff(before, after Snapshot) *Delta {
	d := &Delta{TotalFiles: len(after), TotalBytes: after.Bytes()}
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok:
			d.Added = append(d.Added, preset.Change{Path: p, Size: a.Size})
			d.AddedBytes += a.Size
		case a.Size != b.Size || a.Mode != b.Mode || !a.ModTime.Equal(b.ModTime):
			d.Changed = append(d.Changed, preset.Change{Path: p, Size: a.Size, OldSize: b.Size})
			d.ChangedBytes += a.Size
		}
	}
	for p, b := range before {
		if _, ok := after[p]; !ok {
			d.Removed = append(d.Removed, preset.Change{Path: p, OldSize: b.Size})
			d.RemovedBytes += b.Size
		}
	}
	for _, l := range [][]preset.Change{d.Added, d.Changed, d.Removed} {
		sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	}
	return d
}

// Empty reports whether nothing was added, changed or removed.
func (d *Delta) Empty() bool {
	return len(d.Added) == 0 && len(d.Changed) == 0 && len(d.Removed) == 0
}

// Largest returns up to n added or changed files, largest first (ties by
// path).
func (d *Delta) Largest(n int) []preset.Change {
	all := make([]preset.Change, 0, len(d.Added)+len(d.Changed))
	all = append(all, d.Added...)
	all = append(all, d.Changed...)
	sort.Slice(all, func(i, j int) bool {
		if all[i].Size != all[j].Size {
			return all[i].Size > all[j].Size
		}
		return all[i].Path < all[j].Path
	})
	if n >= 0 && len(all) > n {
		all = all[:n]
	}
	return all
}

// DirOf returns the first path component of p, for grouping a delta by
// preset subdirectory ("numba/x/y.nbi" -> "numba"); "." for top-level
// files.
func DirOf(p string) string {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "."
}
