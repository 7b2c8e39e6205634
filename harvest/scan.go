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
// and what it skipped. Each entry of DEST goes through classify; then the
// units go whole (wholeUnits).
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
	// file's lstat in classify, before anything reads it (and harvest
	// reads with O_NOATIME).
	installed, terr := time.Parse(time.RFC3339Nano, rec.Installed)
	l.Used, l.Loaded = map[string]int64{}, loadedUnits(rec)
	if l.UsageUnknown = usageUnknown(dest); l.UsageUnknown == "" && terr != nil {
		l.UsageUnknown = "its install record has no install time"
	}
	sc := &scanner{l: l, dest: dest, installed: installed, uid: uint32(os.Geteuid()),
		want: map[string]*bundle.RecordEntry{}, bad: map[string]string{}}
	for i := range rec.Entries {
		sc.want[rec.Entries[i].Name] = &rec.Entries[i]
	}
	if sc.root, err = os.OpenRoot(dest); err != nil {
		l.Err = err.Error()
		return l
	}
	defer sc.root.Close()
	if err := fs.WalkDir(sc.root.FS(), ".", sc.classify); err != nil {
		l.Err = fmt.Sprintf("cannot read %s: %v", dest, err)
	}
	sc.wholeUnits()
	return l
}

// A scanner is one scan's state: the list it fills, DEST opened as a root,
// the install record's entries by name, and what classify keeps for
// wholeUnits.
type scanner struct {
	l         *list
	dest      string
	root      *os.Root
	want      map[string]*bundle.RecordEntry
	installed time.Time
	uid       uint32
	// same are unchanged files: kept with their unit if it changed.
	same []File
	// bad maps a unit to its first unreadable file. A unit goes whole or
	// not at all (X6 of the 2026-12-01b review): a file of it that cannot
	// be read leaves the unit out, else the unit rule would drop the
	// set's copy of that file.
	bad map[string]string
}

func (sc *scanner) unreadable(name, why string) {
	sc.l.Skipped = append(sc.l.Skipped, Skip{name, "unreadable: " + why})
	if u := bundle.CacheUnit(name); u != name && sc.bad[u] == "" {
		sc.bad[u] = name
	}
}

func (sc *scanner) skip(name, why string, d fs.DirEntry) error {
	sc.l.Skipped = append(sc.l.Skipped, Skip{name, why})
	if d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// classify sorts one entry of DEST (fs.WalkDirFunc): kbundle's own files,
// symlinks, other owners' and special files are skipped, named; a file
// the record holds unchanged is kept aside (same), counted as read when
// its access time is past the install; a new or changed one is listed,
// with its digest.
func (sc *scanner) classify(name string, d fs.DirEntry, err error) error {
	l := sc.l
	if err != nil {
		if name != "." {
			sc.unreadable(name, errors.Unwrap(err).Error())
			return fs.SkipDir
		}
		return err
	}
	if name == "." || name == bundle.InstalledMarker || name == bundle.HarvestedMarker {
		return nil // the record itself: what DEST is compared with
	}
	if own(name) {
		return sc.skip(name, "kbundle's own file", d)
	}
	fi, err := d.Info()
	if err != nil {
		sc.unreadable(name, err.Error())
		return nil
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return sc.skip(name, "symlink", d)
	case st != nil && st.Uid != sc.uid:
		return sc.skip(name, fmt.Sprintf("owned by uid %d, not you", st.Uid), d)
	case fi.IsDir():
		return nil
	case !fi.Mode().IsRegular():
		return sc.skip(name, "special file ("+fi.Mode().Type().String()+")", d)
	}
	e := sc.want[name]
	if e != nil && st != nil && l.UsageUnknown == "" {
		// An installed file read since (a new one is in the layer).
		if at := time.Unix(st.Atim.Unix()); at.After(sc.installed) {
			u := bundle.CacheUnit(name)
			l.Used[u] = max(l.Used[u], at.UnixNano())
		}
	}
	if e != nil && e.Kind == bundle.KindFile && e.Size == fi.Size() && fi.ModTime().Equal(e.ModTime()) {
		// Unchanged since install (a relocated one too).
		if dig := cmpOr(e.Packed, e.Dig); bundle.CacheUnit(name) != name {
			sc.same = append(sc.same, File{Name: name, Size: -1, Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), Dig: dig, Kept: true})
		}
		return nil
	}
	f := File{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UnixNano(), New: e == nil}
	d2, size, err := digestOf(sc.root, name, sc.dest, l.Origin)
	if err != nil {
		sc.unreadable(name, err.Error())
		return nil
	}
	f.Digest, f.Size, f.Dig = d2, size, bundle.FormatDigest(d2)
	if e != nil && (f.Dig == e.Dig || f.Dig == e.Packed) {
		if bundle.CacheUnit(name) != name {
			f.Kept, f.Rewritten = true, true // written again, with the same bytes
			sc.same = append(sc.same, f)
		}
		return nil // same bytes (after relocation undone)
	}
	l.Files = append(l.Files, f)
	return nil
}

// wholeUnits makes every listed unit whole: its unchanged files join a
// changed unit, and a unit with an unreadable file is left out whole.
func (sc *scanner) wholeUnits() {
	l := sc.l
	changed := map[string]bool{}
	for _, f := range l.Files {
		changed[bundle.CacheUnit(f.Name)] = true
	}
	for _, f := range sc.same {
		if !changed[bundle.CacheUnit(f.Name)] {
			continue
		}
		if f.Size < 0 { // not read yet
			d, size, err := digestOf(sc.root, f.Name, sc.dest, l.Origin)
			if err != nil {
				sc.unreadable(f.Name, err.Error())
				continue
			}
			f.Digest, f.Size, f.Dig = d, size, bundle.FormatDigest(d)
		}
		l.Files = append(l.Files, f)
	}
	if len(sc.bad) == 0 {
		return
	}
	kept := l.Files[:0]
	for _, f := range l.Files {
		if sc.bad[bundle.CacheUnit(f.Name)] == "" {
			kept = append(kept, f)
		}
	}
	l.Files = kept
	for _, u := range slices.Sorted(maps.Keys(sc.bad)) {
		if changed[u] {
			l.Skipped = append(l.Skipped, Skip{u, "cache unit left out whole: its file " + sc.bad[u] + " is unreadable, and a unit comes whole from one layer"})
		}
	}
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
