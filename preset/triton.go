package preset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrGroupFile is wrapped by Relocate when a Triton group file cannot be
// parsed or is larger than maxGroupFile.
var ErrGroupFile = errors.New("bad triton group file")

// maxGroupFile bounds a __grp__*.json file read into memory. Real ones
// list a handful of files (a few hundred bytes).
const maxGroupFile = 4 << 20

// relocateTriton rewrites the absolute paths in every Triton group file
// (__grp__*.json: {"child_paths": {"name": "/abs/cache/KEY/name", ...}})
// under dest. Triton's FileCacheManager.get_group drops children whose
// path does not exist, so an unrewritten group after a move is a miss.
//
// A path under origin is moved to the same place under dest. A path that
// is not (origin unknown, or the cache was filled through another
// TRITON_CACHE_DIR) is repaired from Triton's layout CACHE/KEY/FILE when
// that file exists under dest: first next to the group file, then as
// CACHE/KEY/FILE. Paths already under dest, and values that are not
// strings, are left alone. Only group files are written, each atomically
// (temporary file, rename), keeping its mode.
//
// The files are read and written in dir, which becomes dest afterwards (a
// staged extraction renamed into place) or is dest itself: the paths
// written name dest, and a path under dir counts as one under dest.
func relocateTriton(dir, dest, origin string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if dest, err = filepath.Abs(dest); err != nil {
		return err
	}
	if origin != "" {
		origin = filepath.Clean(origin)
	}
	r := &tritonRelocation{dir: dir, dest: dest, origin: origin}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || !isGroupFile(d.Name()) {
			return nil
		}
		return r.rewriteGroupFile(path)
	})
}

// tritonRelocation: files live in dir, paths are written in terms of dest.
type tritonRelocation struct{ dir, dest, origin string }

// final returns where path (under dir) will be once dir is dest.
func (r *tritonRelocation) final(path string) string {
	rel, err := filepath.Rel(r.dir, path)
	if err != nil {
		return path
	}
	return filepath.Join(r.dest, rel)
}

// staged returns where path (under dest) is now.
func (r *tritonRelocation) staged(path string) string {
	rel, err := filepath.Rel(r.dest, path)
	if err != nil {
		return path
	}
	return filepath.Join(r.dir, rel)
}

func isGroupFile(name string) bool {
	return strings.HasPrefix(name, "__grp__") && strings.HasSuffix(name, ".json")
}

func (r *tritonRelocation) rewriteGroupFile(path string) error {
	// Read without touching its access time: harvest takes a read since
	// the install for the job's (docs/FORMAT.md, "Use records").
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) {
		f, err = os.Open(path)
	}
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxGroupFile+1))
	f.Close()
	if err != nil {
		return err
	}
	if len(data) > maxGroupFile {
		return fmt.Errorf("%s: %w: larger than %d bytes", path, ErrGroupFile, maxGroupFile)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w: %v", path, ErrGroupFile, err)
	}
	raw, ok := doc["child_paths"]
	if !ok {
		return nil // not a group Triton would use either
	}
	var children map[string]any
	if err := json.Unmarshal(raw, &children); err != nil {
		// A remote cache manager's group lists names, not paths: nothing
		// absolute to rewrite.
		return nil
	}
	changed := false
	for name, v := range children {
		p, ok := v.(string)
		if !ok {
			continue
		}
		if np, ok := r.relocatedPath(p, r.final(path)); ok && np != p {
			children[name] = np
			changed = true
		}
	}
	if !changed {
		return nil
	}
	newRaw, err := json.Marshal(children)
	if err != nil {
		return err
	}
	doc["child_paths"] = newRaw
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, out)
}

// relocatedPath returns where child path p of the group file grp (its
// final path, under dest) belongs under dest, and whether it found a place.
func (r *tritonRelocation) relocatedPath(p, grp string) (string, bool) {
	if !filepath.IsAbs(p) {
		return "", false
	}
	p = filepath.Clean(p)
	dest := r.dest
	if within(p, dest) {
		return p, true
	}
	for _, from := range []string{r.origin, r.dir} {
		if from != "" && within(p, from) {
			rel, err := filepath.Rel(from, p)
			if err == nil && filepath.IsLocal(rel) {
				return filepath.Join(dest, rel), true
			}
		}
	}
	// Layout repair: Triton puts a kernel's files in CACHE/KEY/, and the
	// group file sits in the same KEY directory.
	keyDir := filepath.Dir(grp)
	for _, c := range []string{
		filepath.Join(keyDir, filepath.Base(p)),
		filepath.Join(filepath.Dir(keyDir), filepath.Base(filepath.Dir(p)), filepath.Base(p)),
	} {
		if within(c, dest) && regularFile(r.staged(c)) {
			return c, true
		}
	}
	return "", false
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	if dir == string(filepath.Separator) {
		return strings.HasPrefix(p, dir)
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

func regularFile(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, synced, renamed over path, keeping path's permission bits.
func writeFileAtomic(path string, data []byte) (err error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kbundle-relocate-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, bytes.NewReader(data)); err != nil {
		return err
	}
	if err = tmp.Chmod(fi.Mode().Perm()); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
