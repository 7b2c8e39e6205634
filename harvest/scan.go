package harvest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"
)

// scan compares dest with its install record: the new and changed files,
// and what it skipped.
func scan(dest string) *list {
	l := &list{Dest: dest}
	if abs, err := filepath.Abs(dest); err == nil {
		l.Dest = abs
	}
	if _, err := os.Lstat(dest); errors.Is(err, fs.ErrNotExist) {
		l.Missing = true
		return l
	}
	rec, err := bundle.ReadInstallRecord(dest)
	if err != nil {
		l.NoRecord = true
		l.Err = fmt.Sprintf("%s: %v (harvest compares a DEST that kbundle load installed with its install record)", dest, err)
		return l
	}
	l.Origin, l.Presets, l.Set = rec.Origin, rec.Presets, rec.Layers[0].Path
	// Reads since the install, told by access times: taken from each
	// file's lstat below, before anything reads it (and harvest reads
	// with O_NOATIME).
	installed, terr := time.Parse(time.RFC3339Nano, rec.Installed)
	l.Used, l.Loaded = map[string]int64{}, loadedUnits(rec)
	if l.UsageUnknown = usageUnknown(dest); l.UsageUnknown == "" && terr != nil {
		l.UsageUnknown = "its install record has no install time"
	}
	want := map[string]*bundle.RecordEntry{}
	for i := range rec.Entries {
		want[rec.Entries[i].Name] = &rec.Entries[i]
	}
	uid := uint32(os.Geteuid())
	var same []File // unchanged files: kept with their unit if it changed
	// A unit goes whole or not at all (X6 of the 2026-12-01b review): a
	// file of it that cannot be read leaves the unit out, else the unit
	// rule would drop the set's copy of that file.
	bad := map[string]string{} // unit → its first unreadable file
	unreadable := func(name, why string) {
		l.Skipped = append(l.Skipped, Skip{name, "unreadable: " + why})
		if u := bundle.CacheUnit(name); u != name && bad[u] == "" {
			bad[u] = name
		}
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		l.Err = err.Error()
		return l
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name != "." {
				unreadable(name, errors.Unwrap(err).Error())
				return fs.SkipDir
			}
			return err
		}
		if name == "." || name == bundle.InstalledMarker || name == bundle.HarvestedMarker {
			return nil // the record itself: what DEST is compared with
		}
		if own(name) {
			l.Skipped = append(l.Skipped, Skip{name, "kbundle's own file"})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			unreadable(name, err.Error())
			return nil
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l.Skipped = append(l.Skipped, Skip{name, "symlink"})
			return nil
		case st != nil && st.Uid != uid:
			l.Skipped = append(l.Skipped, Skip{name, fmt.Sprintf("owned by uid %d, not you", st.Uid)})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case fi.IsDir():
			return nil
		case !fi.Mode().IsRegular():
			l.Skipped = append(l.Skipped, Skip{name, "special file (" + fi.Mode().Type().String() + ")"})
			return nil
		}
		e := want[name]
		if e != nil && st != nil && l.UsageUnknown == "" {
			// An installed file read since (a new one is in the layer).
			if at := time.Unix(st.Atim.Unix()); at.After(installed) {
				u := bundle.CacheUnit(name)
				l.Used[u] = max(l.Used[u], at.UnixNano())
			}
		}
		if e != nil && e.Kind == bundle.KindFile && e.Size == fi.Size() && fi.ModTime().Equal(e.ModTime()) {
			// Unchanged since install (a relocated one too).
			if dig := cmpOr(e.Packed, e.Dig); bundle.CacheUnit(name) != name {
				same = append(same, File{Name: name, Size: -1, Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), Dig: dig, Kept: true})
			}
			return nil
		}
		f := File{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), New: e == nil}
		d2, size, err := digestOf(root, name, dest, l.Origin)
		if err != nil {
			unreadable(name, err.Error())
			return nil
		}
		f.Digest, f.Size, f.Dig = d2, size, bundle.FormatDigest(d2)
		if e != nil && (f.Dig == e.Dig || f.Dig == e.Packed) {
			if bundle.CacheUnit(name) != name {
				f.Kept, f.Rewritten = true, true // written again, with the same bytes
				same = append(same, f)
			}
			return nil // same bytes (after relocation undone)
		}
		l.Files = append(l.Files, f)
		return nil
	})
	if err != nil {
		l.Err = fmt.Sprintf("cannot read %s: %v", dest, err)
	}
	// A unit goes whole: its unchanged files join a changed unit.
	changed := map[string]bool{}
	for _, f := range l.Files {
		changed[bundle.CacheUnit(f.Name)] = true
	}
	for _, f := range same {
		if !changed[bundle.CacheUnit(f.Name)] {
			continue
		}
		if f.Size < 0 { // not read yet
			d, size, err := digestOf(root, f.Name, dest, l.Origin)
			if err != nil {
				unreadable(f.Name, err.Error())
				continue
			}
			f.Digest, f.Size, f.Dig = d, size, bundle.FormatDigest(d)
		}
		l.Files = append(l.Files, f)
	}
	if len(bad) > 0 {
		kept := l.Files[:0]
		for _, f := range l.Files {
			if bad[bundle.CacheUnit(f.Name)] == "" {
				kept = append(kept, f)
			}
		}
		l.Files = kept
		for _, u := range slices.Sorted(maps.Keys(bad)) {
			if changed[u] {
				l.Skipped = append(l.Skipped, Skip{u, "cache unit left out whole: its file " + bad[u] + " is unreadable, and a unit comes whole from one layer"})
			}
		}
	}
	return l
}

// statfs is unix.Statfs; tests replace it to simulate a noatime mount.
var statfs = unix.Statfs

// usageUnknown says why reads of dest's files cannot be told by their
// access times ("": they can): a noatime mount never updates them.
// relatime updates an access time not later than the mtime (extraction
// sets it to the mtime) or a day old, strictatime every one.
func usageUnknown(dest string) string {
	var st unix.Statfs_t
	if err := statfs(dest, &st); err != nil {
		return "cannot tell how DEST is mounted: " + err.Error()
	}
	if st.Flags&unix.ST_NOATIME != 0 {
		return "DEST is mounted noatime"
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// own reports whether name (slash-separated, relative to DEST) is one of
// kbundle's files: the record, temporaries, locks, bundles.
func own(name string) bool {
	base := path.Base(name)
	return name == bundle.InstalledMarker || strings.HasPrefix(base, ".kbundle-") || strings.HasSuffix(base, ".kbundle")
}

// relocated reports whether relocation rewrites the file (Triton's
// group files, which hold DEST's absolute path).
func relocated(name string) bool {
	b := path.Base(name)
	return strings.HasPrefix(b, "__grp__") && strings.HasSuffix(b, ".json")
}

// maxRelocated bounds a relocated file harvest reads into memory.
const maxRelocated = 64 << 20

// content opens name in root: its bytes as the bundle must hold them
// (relocation undone: dest replaced with origin in a group file).
func content(root *os.Root, name, dest, origin string) (io.Reader, int64, func(), error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, 0, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: no longer a regular file", errChanged)
	}
	if err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Geteuid()) {
			// Replaced by another user's file since it was listed (a
			// directory others can write, inside DEST): never shipped.
			err = fmt.Errorf("%w: now owned by uid %d, not you", errChanged, st.Uid)
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	if relocated(name) && origin != "" && origin != dest && fi.Size() <= maxRelocated {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, 0, nil, err
		}
		b = bytes.ReplaceAll(b, []byte(dest), []byte(origin))
		return bytes.NewReader(b), int64(len(b)), func() {}, nil
	}
	return f, fi.Size(), func() { f.Close() }, nil
}

func digestOf(root *os.Root, name, dest, origin string) (bundle.Digest, int64, error) {
	r, size, done, err := content(root, name, dest, origin)
	if err != nil {
		return bundle.Digest{}, 0, err
	}
	defer done()
	h := xxh3.New()
	n, err := io.Copy(h, r)
	if err == nil && n != size {
		err = fmt.Errorf("changed while read (%d bytes, %d before)", n, size)
	}
	return bundle.Digest(h.Sum128().Bytes()), size, err
}
