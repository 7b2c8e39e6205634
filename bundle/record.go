package bundle

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// contentPrefix opens the bytes a content digest is taken of
// (docs/FORMAT.md, "Content digest").
const contentPrefix = "kbundle content 1\n"

// ContentDigest is the digest of the bundle's entries alone (names, kinds,
// modes as extracted, sizes and per-entry content digests; no mtimes, no
// metadata), computed from the index: two bundles of the same tree packed
// on different hosts, from different origins or at different times have
// the same content digest (docs/FORMAT.md, "Content digest").
func (r *Reader) ContentDigest() Digest { return ContentDigestOf(r.ix.entries) }

// ContentDigestOf is the content digest of entries, which must be sorted
// by name (as a Reader's are).
func ContentDigestOf(entries []Entry) Digest {
	h := newHasher()
	le := binary.LittleEndian
	b := append([]byte(nil), contentPrefix...)
	b = le.AppendUint32(b, uint32(len(entries)))
	for i := range entries {
		e := &entries[i]
		b = le.AppendUint16(b, uint16(len(e.Name)))
		b = append(b, e.Name...)
		kind := byte(kindFile)
		if e.Dir {
			kind = kindDir
		}
		b = append(b, kind)
		b = le.AppendUint16(b, uint16(extractPerm(e.Mode)))
		if !e.Dir {
			b = le.AppendUint64(b, uint64(e.Size))
			b = append(b, e.Digest[:]...)
		}
		if len(b) > 64<<10 {
			h.Write(b)
			b = b[:0]
		}
	}
	h.Write(b)
	return hasherDigest(h)
}

// DigestPrefix names the digest algorithm wherever kbundle prints or
// records a digest: "xxh3-128:" and 32 lowercase hex digits.
const DigestPrefix = "xxh3-128:"

// FormatDigest is d as kbundle prints and records it.
func FormatDigest(d Digest) string { return DigestPrefix + d.String() }

// ParseDigest undoes FormatDigest.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	h, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(h) != 32 {
		return d, fmt.Errorf("digest %q: want %s and 32 hex digits", s, DigestPrefix)
	}
	if _, err := hex.Decode(d[:], []byte(h)); err != nil || strings.ToLower(h) != h {
		return d, fmt.Errorf("digest %q: want %s and 32 lowercase hex digits", s, DigestPrefix)
	}
	return d, nil
}

// RecordVersion is the version of the install record kbundle writes.
const RecordVersion = 1

// recordPrefix is how every install record starts (its first field).
const recordPrefix = `{"kbundle_install_record":`

// MaxRecordLen bounds the install record a reader reads.
const MaxRecordLen = 1 << 30

// ErrNoRecord says a directory holds no install record kbundle can use:
// none, a prose marker of an older kbundle, or one that fails the
// marker's checks. An unknown record version matches ErrVersion instead.
var ErrNoRecord = errors.New("no install record")

// checkVersion checks that the JSON document b, a what ("install
// record"), starts with prefix and that its version key is want: a
// number below 1 or not a number is ErrFormat, another version
// ErrVersion.
func checkVersion(b []byte, what, prefix, key string, want int64) error {
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return errf(ErrFormat, "%s does not start with %s", what, prefix)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return errf(ErrFormat, "%s: %v", what, err)
	}
	var ver json.Number
	if err := json.Unmarshal(v[key], &ver); err != nil {
		return errf(ErrFormat, "%s version %s", what, v[key])
	}
	if n, err := ver.Int64(); err != nil || n < 1 {
		return errf(ErrFormat, "%s version %q", what, ver)
	} else if n != want {
		return errf(ErrVersion, "%s version %d (this kbundle reads version %d)", what, n, want)
	}
	return nil
}

// ErrOldMarker says a directory holds the prose marker of an older
// kbundle: kbundle installed it, but without a record of the tree. It
// matches ErrNoRecord too.
var ErrOldMarker = fmt.Errorf("%w: a marker of an older kbundle", ErrNoRecord)

// An InstallRecord is the `.kbundle-installed` file kbundle writes at the
// top of every tree it installs (docs/FORMAT.md, "Install record").
// Fields are only ever added.
type InstallRecord struct {
	Version int `json:"kbundle_install_record"`
	// Dest is where the tree was installed, and Origin where the bundle
	// was packed: relocation rewrote paths from Origin to Dest.
	Dest   string `json:"dest"`
	Origin string `json:"origin"`
	// Installed is when (RFC 3339, UTC, nanoseconds), Job the job id and
	// Host the node that installed it.
	Installed string `json:"installed"`
	Job       string `json:"job,omitempty"`
	Host      string `json:"host,omitempty"`
	// Presets applied (relocation), by name.
	Presets []string `json:"presets"`
	// ContentDigest is the set's: its merged view's (one layer: the
	// layer's).
	ContentDigest string        `json:"content_digest"`
	Layers        []RecordLayer `json:"layers"`
	// Filter says what the install left out of the set's view (load's GPU
	// architecture filter, "gpu-arch cuda:90"), Skipped how many entries,
	// and SetContentDigest is then the whole view's content digest, while
	// ContentDigest and Entries describe the tree as installed. All three
	// are absent when nothing was left out.
	Filter           string `json:"filter,omitempty"`
	Skipped          int    `json:"skipped,omitempty"`
	SetContentDigest string `json:"set_content_digest,omitempty"`
	// Entries are the tree as installed, after relocation, sorted by name.
	Entries []RecordEntry `json:"entries"`
}

// RecordLayer is one bundle of the installed set.
type RecordLayer struct {
	Path          string `json:"path"`
	Digest        string `json:"digest"` // the whole-file digest
	ContentDigest string `json:"content_digest"`
	Entries       int    `json:"entries"`
}

// RecordEntry is one entry as installed.
type RecordEntry struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"` // "dir" or "file"
	Mode  uint32 `json:"mode"` // permission bits
	Size  int64  `json:"size"`
	Sec   int64  `json:"mtime_sec"`
	Nsec  int64  `json:"mtime_nsec"`
	Layer int    `json:"layer"`            // index in Layers the entry came from
	Dig   string `json:"digest,omitempty"` // files: the content as installed
	// Packed is the content's digest in the bundle, when relocation
	// rewrote the file at install: what undoing the relocation must give.
	Packed string `json:"packed_digest,omitempty"`
}

// Record kinds.
const (
	KindDir  = "dir"
	KindFile = "file"
)

// ModTime is the entry's mtime.
func (e *RecordEntry) ModTime() time.Time { return time.Unix(e.Sec, e.Nsec) }

// RecordInfo is what a caller adds to the install record Stage writes.
type RecordInfo struct {
	Bundle  string   // the bundle's path ("": the Reader's own name, made absolute)
	Job     string   // the job id
	Host    string   // this node's name
	Presets []string // presets applied to the staged tree
	// Filter names ExtractOptions.Skip in the record when it left
	// something out ("gpu-arch cuda:90").
	Filter string
}

// buildRecord makes the record of the staged tree root (dir tmp), as it
// is on disk now: every entry is lstat'ed; a file's digest is the one it
// had before (prev, else the index's) unless its size or mtime changed
// since (relocation rewrote it), when it is read again.
func (s *Staged) buildRecord(root *os.Root, prev *InstallRecord) (*InstallRecord, error) {
	base := s.layers[0].r
	view := s.view
	if view == nil { // Stage failed before the merged view was made
		for _, e := range base.ix.entries {
			view = append(view, SetEntry{Entry: e})
		}
	}
	es := make([]Entry, len(view))
	for i := range view {
		es[i] = view[i].Entry
	}
	rec := &InstallRecord{Version: RecordVersion, Dest: s.dest, Origin: base.ix.meta[MetaOrigin],
		Installed: time.Now().UTC().Format(time.RFC3339Nano), Job: s.info.Job, Host: s.info.Host,
		Presets: append([]string{}, s.info.Presets...), ContentDigest: FormatDigest(ContentDigestOf(es)),
		Entries: make([]RecordEntry, len(view))}
	if s.skipped > 0 {
		rec.Filter, rec.Skipped, rec.SetContentDigest = s.info.Filter, s.skipped, FormatDigest(s.setContent)
	}
	for _, l := range s.layers {
		p := l.path
		if p == "" {
			p = l.r.name
		}
		if abs, err := filepath.Abs(p); p != "" && err == nil {
			p = abs
		}
		rec.Layers = append(rec.Layers, RecordLayer{Path: p, Digest: FormatDigest(l.r.FileDigest()),
			ContentDigest: FormatDigest(l.r.ContentDigest()), Entries: len(l.r.ix.entries)})
	}
	before := map[string]*RecordEntry{}
	if prev != nil {
		for i := range prev.Entries {
			before[prev.Entries[i].Name] = &prev.Entries[i]
		}
	}
	for i := range view {
		e := &view[i].Entry
		fi, err := root.Lstat(e.Name)
		if err != nil {
			return nil, fmt.Errorf("cannot record %s: %w", e.Name, err)
		}
		mt := fi.ModTime()
		re := RecordEntry{Name: e.Name, Kind: KindFile, Mode: uint32(fi.Mode().Perm()), Size: fi.Size(), Sec: mt.Unix(), Nsec: int64(mt.Nanosecond()), Layer: view[i].Layer}
		p := before[e.Name]
		switch {
		case e.Dir:
			re.Kind, re.Size = KindDir, 0
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("cannot record %s: no longer a regular file", e.Name)
		case p != nil && p.Size == re.Size && p.Sec == re.Sec && p.Nsec == re.Nsec:
			re.Dig, re.Packed = p.Dig, p.Packed // unchanged since the last record
		case p == nil && e.Size == re.Size:
			re.Dig = FormatDigest(e.Digest) // as extracted: checked as it was written
		default:
			d, err := hashAt(root, e.Name)
			if err != nil {
				return nil, fmt.Errorf("cannot record %s: %w", e.Name, err)
			}
			re.Dig = FormatDigest(d)
			if d != e.Digest {
				re.Packed = FormatDigest(e.Digest)
			}
		}
		rec.Entries[i] = re
	}
	return rec, nil
}

// hashAt is the digest of the regular file name in root, read without
// changing its access time (openNoAtime).
func hashAt(root *os.Root, name string) (Digest, error) {
	f, err := openNoAtime(root, name)
	if err != nil {
		return Digest{}, err
	}
	defer f.Close()
	h := newHasher()
	if _, err := io.Copy(h, f); err != nil {
		return Digest{}, err
	}
	return hasherDigest(h), nil
}

// openNoAtime opens the regular file name in root for reading, not
// through a symlink, with O_NOATIME where the kernel permits it (the
// caller owns the file, or has CAP_FOWNER; else EPERM, and it opens
// without): kbundle's own reads of a DEST (a load's comparison, status,
// diff, the record) must not look like the job's, which harvest tells
// by access times (docs/FORMAT.md, "Use records").
func openNoAtime(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		f, err = root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	}
	return f, err
}

// writeRecord writes the install record of the staged tree: created
// (O_EXCL) at Stage, rewritten in place (the tree is still private) when
// the staged tree was changed through Dir before Install.
func (s *Staged) writeRecord() error {
	root, err := os.OpenRoot(s.tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	rec, err := s.buildRecord(root, s.rec)
	if err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if s.rec != nil {
		flag = os.O_WRONLY | os.O_TRUNC | unix.O_NOFOLLOW
	}
	f, err := root.OpenFile(InstalledMarker, flag, markerPerm)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", InstalledMarker, err)
	}
	err = f.Chmod(markerPerm) // whatever the umask: checkDest requires it
	if err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		s.rec = rec
	}
	return err
}

// Record is the install record written into the staged tree.
func (s *Staged) Record() *InstallRecord { return s.rec }

// ReadInstallRecord reads dest's install record. dest must pass the
// checks --force makes before it replaces a tree (a directory of the
// caller's, not a symlink, not writable by group or others, holding the
// marker kbundle writes); else, or when dest holds an older kbundle's
// prose marker, the error matches ErrNoRecord. A record of a newer
// version matches ErrVersion.
func ReadInstallRecord(dest string) (*InstallRecord, error) {
	fd, err := unix.Open(dest, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dest, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dest, Err: err}
	}
	if st.Uid != uint32(os.Geteuid()) {
		return nil, &Error{File: dest, Err: ErrNoRecord, Msg: "not your directory"}
	}
	if msg := markerProblem(fd, &st); msg != "" {
		return nil, &Error{File: dest, Err: ErrNoRecord, Msg: strings.TrimSuffix(msg, forceKeeps)}
	}
	return readRecordAt(fd, dest)
}

// ParseInstallRecord parses and checks an install record's bytes
// (docs/FORMAT.md, "Install record"). An older kbundle's prose marker
// matches ErrOldMarker (and ErrNoRecord); a newer version, ErrVersion; anything else that
// breaks the rules, ErrFormat.
func ParseInstallRecord(b []byte) (*InstallRecord, error) {
	if bytes.HasPrefix(b, []byte(markerText)) {
		return nil, errf(ErrOldMarker, "without a record of the tree")
	}
	if len(b) > MaxRecordLen {
		return nil, errf(ErrTooLarge, "install record longer than %d bytes", MaxRecordLen)
	}
	if err := checkVersion(b, "install record", recordPrefix, "kbundle_install_record", RecordVersion); err != nil {
		return nil, err
	}
	rec := &InstallRecord{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, errf(ErrFormat, "install record: %v", err)
	}
	if len(rec.Entries) > MaxEntries {
		return nil, errf(ErrTooLarge, "install record of %d entries (limit %d)", len(rec.Entries), MaxEntries)
	}
	if len(rec.Layers) == 0 {
		return nil, errf(ErrFormat, "install record without a layer")
	}
	if _, err := ParseDigest(rec.ContentDigest); err != nil {
		return nil, errf(ErrFormat, "install record: set %v", err)
	}
	if rec.SetContentDigest != "" {
		if _, err := ParseDigest(rec.SetContentDigest); err != nil {
			return nil, errf(ErrFormat, "install record: set %v", err)
		}
	}
	if rec.Skipped < 0 {
		return nil, errf(ErrFormat, "install record: skipped %d", rec.Skipped)
	}
	for i := range rec.Entries {
		e := &rec.Entries[i]
		if err := checkName(e.Name); err != nil {
			return nil, err
		}
		if i > 0 && e.Name <= rec.Entries[i-1].Name {
			return nil, errf(ErrFormat, "install record: entry %q out of order or repeated", e.Name)
		}
		if e.Mode > 0o777 || e.Size < 0 || e.Nsec < 0 || e.Nsec >= 1e9 || e.Layer < 0 || e.Layer >= len(rec.Layers) {
			return nil, errf(ErrFormat, "install record: entry %q: mode, size, mtime or layer out of range", e.Name)
		}
		switch e.Kind {
		case KindDir:
		case KindFile:
			if _, err := ParseDigest(e.Dig); err != nil {
				return nil, errf(ErrFormat, "install record: entry %q: %v", e.Name, err)
			}
		default:
			return nil, errf(ErrFormat, "install record: entry %q: kind %q", e.Name, e.Kind)
		}
	}
	return rec, nil
}

// TreeChange is how an installed tree differs from its record: the names
// of new, changed and missing entries, each sorted.
type TreeChange struct {
	New, Changed, Missing []string
}

// Same reports whether nothing changed.
func (c *TreeChange) Same() bool { return len(c.New)+len(c.Changed)+len(c.Missing) == 0 }

func (c *TreeChange) String() string {
	return fmt.Sprintf("%d new, %d changed, %d missing", len(c.New), len(c.Changed), len(c.Missing))
}

// CompareTree compares the tree at dest with its install record, without
// following symlinks. An entry is unchanged when its kind and mode match
// and, for a file, its size and mtime match the record; a file whose size
// matches but whose mtime does not is read and compared by digest (so a
// file rewritten with the same bytes is unchanged). Directory mtimes do
// not count (their entries do). Something that is neither a directory
// nor a regular file is changed (or new). The record file itself is not
// an entry.
func CompareTree(dest string, rec *InstallRecord) (*TreeChange, error) {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	want := make(map[string]*RecordEntry, len(rec.Entries))
	for i := range rec.Entries {
		want[rec.Entries[i].Name] = &rec.Entries[i]
	}
	c := &TreeChange{}
	seen := make(map[string]bool, len(rec.Entries))
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		if name == InstalledMarker || name == HarvestedMarker {
			return nil
		}
		e := want[name]
		if e == nil {
			c.New = append(c.New, name)
			return nil
		}
		seen[name] = true
		fi, err := d.Info()
		if err != nil {
			return err
		}
		changed, err := entryChanged(root, name, fi, e)
		if err != nil {
			return err
		}
		if changed {
			c.Changed = append(c.Changed, name)
			if d.IsDir() && e.Kind != KindDir {
				return fs.SkipDir // a file became a directory: all below is new
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot compare %s with its install record: %w", dest, err)
	}
	for i := range rec.Entries {
		if n := rec.Entries[i].Name; !seen[n] {
			c.Missing = append(c.Missing, n)
		}
	}
	return c, nil
}

// entryChanged compares one entry (fi: its lstat) with its record.
func entryChanged(root *os.Root, name string, fi fs.FileInfo, e *RecordEntry) (bool, error) {
	switch {
	case fi.IsDir() != (e.Kind == KindDir), !fi.IsDir() && !fi.Mode().IsRegular():
		return true, nil
	case uint32(fi.Mode().Perm()) != e.Mode:
		return true, nil
	case fi.IsDir():
		return false, nil
	case fi.Size() != e.Size:
		return true, nil
	case fi.ModTime().Equal(e.ModTime()):
		return false, nil
	}
	d, err := hashAt(root, name)
	if err != nil {
		return false, err
	}
	return FormatDigest(d) != e.Dig, nil
}

// PathDigest is the digest of the regular file name in dest (a
// slash-separated name), read without following symlinks out of dest.
func PathDigest(dest, name string) (Digest, error) {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return Digest{}, err
	}
	defer root.Close()
	return hashAt(root, path.Clean(name))
}
