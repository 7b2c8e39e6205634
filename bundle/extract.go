package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ExtractOptions tune Extract and Stage. The zero value is valid.
type ExtractOptions struct {
	// Force replaces a non-empty destination (atomically where the kernel
	// can exchange two directories, else by two renames).
	Force bool
	// Parents creates the destination's missing parent directories (mode
	// 0700; removed again if the extraction fails); without it a missing
	// one is refused with ErrNoParent, naming it.
	Parents bool
	// Jobs is the number of parallel workers; 0 means all cores.
	Jobs int
	// Keep is the bundle file being extracted when the Reader does not
	// read it itself (a Stream fed from it, as on load's rank 0): Force
	// refuses to replace a destination that holds it. A Reader opened by
	// Open keeps its own file without it.
	Keep *ReadCloser
	// Progress, when set, is called with the bytes of content written so
	// far and the total, from 0 up to total (calls may come from several
	// goroutines, with done never decreasing).
	Progress func(done, total int64)
	// Trust adds the owners and groups whose write permission on dest's
	// parent and the directories above it is accepted (nil: none).
	Trust *TrustPolicy
	// Record is what the install record says besides the tree: the job,
	// the host, the presets (docs/FORMAT.md, "Install record").
	Record RecordInfo
	// Layers, when set, gives the further bundles of the set whose base
	// is being staged, in order, each with its path for the record, and
	// nil after the last: each is extracted over the staged tree, a later
	// layer winning by name and, with Unit, per cache unit (OpenedSet's
	// Merged view, docs/FORMAT.md "Sets"). Stage only.
	Layers func() (*Reader, string, error)
	// Unit is the cache unit of a name for Layers (CacheUnit; nil: each
	// name its own).
	Unit func(name string) string
	// Skip, when set, leaves out of the tree every entry whose name it
	// returns true for, and everything below a directory it leaves out
	// (load's GPU architecture filter): such content is still read and
	// checked against its digest, but not written. It must depend on the
	// name alone, the same for every bundle of a set. The install record
	// then describes the tree as installed, without them, and names
	// Record.Filter, how many entries were left out and the set's own
	// content digest (docs/FORMAT.md, "Install record").
	Skip func(name string) bool
}

// ExtractResult says what Extract did.
type ExtractResult struct {
	Dest  string
	Files int
	Dirs  int
	Bytes int64
	// Skipped is how many entries ExtractOptions.Skip left out, and
	// SkippedBytes the size of their files.
	Skipped      int
	SkippedBytes int64
}

// skipped reports whether skip leaves name out: itself, or a directory
// above it.
func skipped(skip func(string) bool, name string) bool {
	if skip == nil {
		return false
	}
	for p := name; ; p = path.Dir(p) {
		if skip(p) {
			return true
		}
		if !strings.Contains(p, "/") {
			return false
		}
	}
}

// skipList is, for each entry of r, whether skip leaves it out; nil when
// skip is nil.
func (r *Reader) skipList(skip func(string) bool) []bool {
	if skip == nil {
		return nil
	}
	out := make([]bool, len(r.ix.entries))
	for i := range r.ix.entries {
		out[i] = skipped(skip, r.ix.entries[i].Name)
	}
	return out
}

// Extract writes the bundle's tree to dest. It extracts into a private
// (0700) temporary sibling of dest through os.Root (no symlink is ever
// followed out of it), checks every content digest, restores permissions
// and nanosecond mtimes, and renames the result into place: a reader of
// dest sees either what was there before or the whole tree, never part of
// it. dest itself gets mode 0700. A non-empty dest is refused with ErrExist
// unless opt.Force. On failure or cancellation nothing is left behind.
// Extract is Stage, Install and Commit.
func (r *Reader) Extract(ctx context.Context, dest string, opt *ExtractOptions) (*ExtractResult, error) {
	s, err := r.Stage(ctx, dest, opt)
	if err != nil {
		return nil, err
	}
	if err := s.Install(); err != nil {
		s.Abort()
		return nil, err
	}
	return s.Result(), s.Commit()
}

// Staged is a tree extracted next to its destination but not yet in
// place: the first half of an extraction that must succeed everywhere or
// nowhere (on every node of a job). Install moves it into place, Commit
// then drops what it replaced, and Abort undoes either step. A Staged is
// used from one goroutine.
type Staged struct {
	dest, parent string
	tmp          string // the staged tree; after Install with replace, the old tree
	created      string // topmost parent directory Stage created, or ""
	replace      bool
	installed    bool
	done         bool
	res          *ExtractResult
	layers       []stagedLayer // the set's bundles, base first
	view         []SetEntry    // the merged view staged, by name
	info         RecordInfo
	rec          *InstallRecord // the record written into tmp
	touched      bool           // Dir was handed out: the record is written again at Install
	// skipped entries (and bytes) ExtractOptions.Skip left out of the
	// view; setContent is then the whole view's content digest.
	skipped      int
	skippedBytes int64
	setContent   Digest
}

// Stage extracts the bundle into a private temporary sibling of dest (see
// Extract) and checks that dest may be written, without touching dest.
// Before it starts it removes the temporaries that killed kbundle
// processes left in dest's parent (RemoveStale).
func (r *Reader) Stage(ctx context.Context, dest string, opt *ExtractOptions) (_ *Staged, err error) {
	if opt == nil {
		opt = &ExtractOptions{}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	dest, err = filepath.Abs(dest)
	if err != nil {
		return nil, err
	}
	replace, err := checkDest(dest, opt.Force)
	if err != nil {
		return nil, err
	}
	if replace {
		if err := r.checkKeep(dest, opt.Keep); err != nil {
			return nil, err
		}
	}
	s := &Staged{dest: dest, parent: filepath.Dir(dest), replace: replace, info: opt.Record,
		layers: []stagedLayer{{r: r, path: opt.Record.Bundle}}}
	s.created = missingAncestor(s.parent)
	if s.created != "" && !opt.Parents {
		return nil, &Error{File: s.created, Err: ErrNoParent, Msg: "the destination " + dest + " is inside it"}
	}
	if err := os.MkdirAll(s.parent, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create %s: %w", s.parent, err)
	}
	defer func() {
		if err != nil {
			s.removeCreated()
		}
	}()
	// Whoever can write dest's parent (or a directory above it) can swap
	// the extracted tree after we installed it, with their own kernels
	// (W1): the parent is held to the bundle's trust rules.
	if err := checkTrustDir(s.parent, opt.Trust); err != nil {
		var e *Error
		if errors.As(err, &e) && errors.Is(err, ErrUntrusted) {
			return nil, &Error{File: e.File, Err: ErrDestination, Msg: "untrusted place to extract to: " + e.Msg +
				"; whoever can write it could replace the extracted tree with their own"}
		}
		return nil, fmt.Errorf("cannot extract into %s: %w", s.parent, err)
	}
	if err := r.checkSpace(s.parent); err != nil {
		return nil, err
	}
	RemoveStale(s.parent) // best effort: a failure here must not stop the load
	var done func()
	s.tmp, ctx, done, err = newTempDirFor(ctx, s.parent, dest)
	if err != nil {
		return nil, fmt.Errorf("cannot extract into %s: %w", s.parent, err)
	}
	defer func() {
		if err != nil {
			dropTemp(s.tmp)
		}
	}()
	s.res, err = r.extractInto(ctx, s.tmp, opt, false)
	if err == nil {
		err = s.stageLayers(ctx, opt)
	}
	done() // RemoveTemps waits for this: no worker writes into s.tmp any more
	if err != nil {
		return nil, err
	}
	if err := s.writeRecord(); err != nil {
		return nil, err
	}
	s.res.Dest = dest
	if err := os.Chmod(s.tmp, 0o700); err != nil {
		return nil, err
	}
	if err := syncDir(s.tmp); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the staged tree's temporary directory, where it can still be
// changed (such as a preset's path relocation) before Install. Install
// then writes the install record again, with the entries as they are.
func (s *Staged) Dir() string {
	s.touched = true
	return s.tmp
}

// Dest is the destination directory.
func (s *Staged) Dest() string { return s.dest }

// Result says what was extracted.
func (s *Staged) Result() *ExtractResult { return s.res }

// Install moves the staged tree into place atomically. It fails, leaving
// dest as it was, if dest was filled meanwhile (and Stage was not told
// to replace it).
func (s *Staged) Install() error {
	if s.done || s.installed {
		return errors.New("bundle: Install on a finished or installed Staged")
	}
	if s.touched {
		// The record holds the tree as installed: after relocation.
		if err := s.writeRecord(); err != nil {
			return err
		}
		s.touched = false
	}
	if err := s.install(); err != nil {
		return err
	}
	s.installed = true
	return syncDir(s.parent)
}

// install does Install's renames under tempsMu, so that RemoveTemps
// (a signal, a timeout) comes either before (and Install fails with
// ErrExiting) or after (and dest holds the whole tree) (S7). The staged
// tree's tempMarker is unlinked just before it is renamed into place.
func (s *Staged) install() error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	e := temps[s.tmp]
	if closing || e == nil {
		return fmt.Errorf("cannot move the extracted tree into place: %w", ErrExiting)
	}
	unlockTree(s.tmp, e)
	if !s.replace {
		// rename(2), not os.Rename: it atomically replaces an empty
		// directory (os.Rename refuses any existing directory), and fails
		// if someone filled dest meanwhile.
		if err := unix.Renameat(unix.AT_FDCWD, s.tmp, unix.AT_FDCWD, s.dest); err != nil {
			relockTree(s.tmp, e)
			return s.takenErr(err)
		}
		forget(s.tmp)
		s.tmp = ""
	} else if err := unix.Renameat2(unix.AT_FDCWD, s.tmp, unix.AT_FDCWD, s.dest, unix.RENAME_EXCHANGE); err == nil {
		// s.tmp now holds the old tree, removed by Commit: it gets a
		// marker of its own, so RemoveStale can remove it should this
		// process be killed before.
		relockTree(s.tmp, e)
	} else {
		// No RENAME_EXCHANGE (some network file systems): move the old tree
		// aside, then the new one in; between the two renames dest is
		// missing for an instant.
		old := s.tmp + ".old"
		if err := os.Rename(s.dest, old); err != nil {
			relockTree(s.tmp, e)
			return fmt.Errorf("cannot replace %s: %w", s.dest, err)
		}
		if err := os.Rename(s.tmp, s.dest); err != nil {
			os.Rename(old, s.dest)
			relockTree(s.tmp, e)
			return fmt.Errorf("cannot replace %s: %w", s.dest, err)
		}
		forget(s.tmp)
		trackTree(old, s.dest)
		s.tmp = old
	}
	return nil
}

// takenErr is Install's error when rename(2) failed with err: when
// another user made dest meanwhile (EPERM in a sticky directory, EEXIST or
// ENOTEMPTY when they put something in it), it says so, rather than
// blaming the user's permissions.
func (s *Staged) takenErr(err error) error {
	var st unix.Stat_t
	if me := uint32(os.Geteuid()); (err == unix.EPERM || err == unix.EEXIST || err == unix.ENOTEMPTY || err == unix.EACCES) &&
		unix.Lstat(s.dest, &st) == nil && st.Uid != me {
		return &Error{File: s.dest, Err: ErrDestination, Msg: fmt.Sprintf("another user, uid %d%s, created it during the load (%v), "+
			"so the extracted tree cannot be moved into place; choose a destination in a directory only you can write", st.Uid, userName(st.Uid), err)}
	}
	return fmt.Errorf("cannot move the extracted tree into place: %w", err)
}

// Commit ends a successful installation: it removes the tree that dest
// held before, if any.
func (s *Staged) Commit() error {
	if !s.installed || s.done {
		return errors.New("bundle: Commit before Install")
	}
	s.done = true
	if s.tmp == "" {
		return nil
	}
	return dropTemp(s.tmp)
}

// Abort undoes Stage, or Install when it was installed: dest is left as
// it was before Stage (the replaced tree is put back), and the temporary
// tree and the parent directories Stage created are removed.
func (s *Staged) Abort() error {
	if s == nil || s.done {
		return nil
	}
	s.done = true
	if s.installed {
		if err := s.uninstall(); err != nil {
			return err
		}
	}
	var err error
	if s.tmp != "" {
		err = dropTemp(s.tmp)
	}
	s.removeCreated()
	return err
}

// uninstall undoes install, under tempsMu.
func (s *Staged) uninstall() error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if s.replace {
		// s.tmp holds the old tree: swap it back, without its marker.
		e := temps[s.tmp]
		unlockTree(s.tmp, e)
		if err := unix.Renameat2(unix.AT_FDCWD, s.tmp, unix.AT_FDCWD, s.dest, unix.RENAME_EXCHANGE); err != nil {
			if e != nil {
				relockTree(s.tmp, e)
			}
			return fmt.Errorf("cannot put the old %s back: %w (it is in %s)", s.dest, err, s.tmp)
		}
		if e != nil {
			relockTree(s.tmp, e) // the new tree, to be removed
		}
		return nil
	}
	// Take the new tree out of dest before removing it, so dest
	// disappears at once rather than file by file: rename(2) onto a fresh
	// empty temporary directory, which it replaces.
	tmp, err := os.MkdirTemp(s.parent, tempPattern())
	if err == nil {
		if err = unix.Renameat(unix.AT_FDCWD, s.dest, unix.AT_FDCWD, tmp); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("cannot take %s back: %w", s.dest, err)
	}
	s.tmp = tmp
	trackTree(tmp, s.dest)
	return nil
}

// removeCreated removes the parent directories Stage created, if still
// empty.
func (s *Staged) removeCreated() {
	if s.created == "" {
		return
	}
	for d := s.parent; os.Remove(d) == nil && d != s.created; d = filepath.Dir(d) {
	}
}

// InstalledMarker is the file kbundle writes at the top of every tree it
// extracts. Force replaces only a destination that holds it: kbundle never
// deletes a directory it did not install (W5).
const InstalledMarker = ".kbundle-installed"

// The marker as kbundle makes it: its mode, and how an older kbundle's
// prose marker starts (the install record starts with recordPrefix).
const (
	markerPerm = 0o600
	markerText = "kbundle installed this tree from a bundle with digest xxh3-128:"
)

// checkDest decides whether dest may be written, before any work: it may
// be missing or an empty directory of ours; a non-empty one only with
// force, and only when kbundle installed it (InstalledMarker); then replace
// is true. A symlink, a file, a mount point or another user's directory is
// refused (ErrDestination) whatever force says.
func checkDest(dest string, force bool) (replace bool, err error) {
	var st unix.Stat_t
	err = unix.Lstat(dest, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "lstat", Path: dest, Err: err}
	}
	refuse := func(msg string) (bool, error) { return false, &Error{File: dest, Err: ErrDestination, Msg: msg} }
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return refuse("it is a symlink, which kbundle neither follows nor replaces; give the directory it points to, or another destination")
	default:
		return refuse("it is not a directory; remove it or choose another destination")
	}
	if me := uint32(os.Geteuid()); st.Uid != me {
		return refuse(fmt.Sprintf("it is owned by uid %d%s, not by you (uid %d): kbundle does not write into or replace another user's directory; choose another destination",
			st.Uid, userName(st.Uid), me))
	}
	var pst unix.Stat_t
	if err := unix.Stat(filepath.Dir(dest), &pst); err == nil && pst.Dev != st.Dev {
		return refuse("it is a mount point: kbundle installs a tree by renaming it into place, which cannot replace a mount point; extract into a directory inside it, such as " +
			filepath.Join(dest, "kbundle"))
	}
	fd, err := unix.Open(dest, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: dest, Err: err}
	}
	f := os.NewFile(uintptr(fd), dest) // owns fd from here
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) == 0 {
		return false, nil
	}
	if !force {
		return false, &Error{File: dest, Err: ErrExist} // the caller words the way to replace it (Force)
	}
	if msg := markerProblem(fd, &st); msg != "" {
		return refuse(msg)
	}
	return true, nil
}

// forceKeeps ends every refusal of markerProblem: what Force does not do,
// and what to do instead (RemoveInstalled says it in its own words).
const forceKeeps = ", so kbundle will not replace it or delete what is in it; remove it yourself if it is yours to lose, or choose another destination"

// markerProblem says why the directory open as fd (stat st, ours) is not a
// tree kbundle installed, or returns "". Its InstalledMarker must be the
// file kbundle made (an install record, or an older kbundle's prose marker): a regular file of the directory's owner, with one
// link (another user can hard-link a file of ours into a directory they
// can write, V1), mode markerPerm and kbundle's text; and the directory
// must not be writable by group or others (kbundle makes it 0700), or
// they could have put the marker there.
func markerProblem(fd int, st *unix.Stat_t) string {
	if st.Mode&0o022 != 0 {
		return fmt.Sprintf("its mode %04o lets others write it (kbundle installs a tree 0700): whoever can write it could have put an %s there%s",
			st.Mode&0o7777, InstalledMarker, forceKeeps)
	}
	mfd, err := unix.Openat(fd, InstalledMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "kbundle did not install this directory (it holds no " + InstalledMarker + ")" + forceKeeps
	}
	mf := os.NewFile(uintptr(mfd), InstalledMarker) // owns mfd
	defer mf.Close()
	var mst unix.Stat_t
	if err := unix.Fstat(mfd, &mst); err != nil {
		return "kbundle did not install this directory (cannot stat its " + InstalledMarker + ": " + err.Error() + ")" + forceKeeps
	}
	why := ""
	switch {
	case mst.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "not a regular file"
	case mst.Uid != st.Uid:
		why = fmt.Sprintf("owned by uid %d%s, not by the directory's owner", mst.Uid, userName(mst.Uid))
	case mst.Nlink != 1:
		why = fmt.Sprintf("it has %d hard links: someone linked another file there", mst.Nlink)
	case mst.Mode&0o7777 != markerPerm:
		why = fmt.Sprintf("mode %04o, not %04o", mst.Mode&0o7777, markerPerm)
	default:
		buf := make([]byte, len(markerText))
		n, _ := io.ReadFull(mf, buf)
		if string(buf[:n]) != markerText && (n < len(recordPrefix) || string(buf[:len(recordPrefix)]) != recordPrefix) {
			why = "it does not hold kbundle's text (an install record, or an older kbundle's marker)"
		}
	}
	if why != "" {
		return "kbundle did not install this directory (its " + InstalledMarker + " is not the one kbundle writes: " + why + ")" + forceKeeps
	}
	return ""
}

// checkKeep refuses to replace dest when the bundle file being extracted
// (keep's, else the Reader's own) lies inside it, at any depth: Force
// would delete the bundle with the old tree (S9), as after `warm --dir
// DEST --pack`, whose bundle is DEST/cache.kbundle.
func (r *Reader) checkKeep(dest string, keep *ReadCloser) error {
	f, _ := r.r.(*os.File)
	if keep != nil {
		f = keep.f
	}
	if f == nil {
		return nil // in memory: no file to lose
	}
	var st unix.Stat_t
	if err := unix.Lstat(dest, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dest, Err: err}
	}
	if holds(&st, f) {
		return &Error{File: dest, Err: ErrDestination, Msg: "it holds the bundle being extracted (" + Printable(f.Name()) +
			"), which replacing the tree would delete; move the bundle out of it first, or choose another destination"}
	}
	return nil
}

// holds reports whether the directory of stat st holds the open file f at
// any depth. It walks up by device and inode, through "..", from the
// directory the kernel says holds f (/proc/self/fd) and from the one f was
// opened in (its name), so that neither a symlink on the way nor a rename
// since the open hides it. It cannot tell: false.
func holds(st *unix.Stat_t, f *os.File) bool {
	var dirs []string
	if rc, err := f.SyscallConn(); err == nil { // not f.Fd(): it would make f blocking
		rc.Control(func(fd uintptr) {
			if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd))); err == nil && filepath.IsAbs(p) {
				dirs = append(dirs, filepath.Dir(p)) // a deleted file's "p (deleted)" leads nowhere inside
			}
		})
	}
	if abs, err := filepath.Abs(f.Name()); err == nil {
		dirs = append(dirs, filepath.Dir(abs))
	}
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		for {
			var cur unix.Stat_t
			if unix.Fstat(fd, &cur) != nil {
				break
			}
			if cur.Dev == st.Dev && cur.Ino == st.Ino {
				unix.Close(fd)
				return true
			}
			up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			var ust unix.Stat_t
			if err != nil || unix.Fstat(up, &ust) != nil || (ust.Dev == cur.Dev && ust.Ino == cur.Ino) {
				if err == nil {
					unix.Close(up)
				}
				break // the root, or cannot go up
			}
			unix.Close(fd)
			fd = up
		}
		unix.Close(fd)
	}
	return false
}

// checkSpace compares what the bundle unpacks to (its files rounded up to
// the file system's blocks, one block per directory) and its entry count
// with the free space and inodes where it is to be extracted, before
// anything is written: a small bundle whose files share one content can
// declare terabytes (W4), or more than 2^64 bytes, which a plain uint64
// sum would wrap to a small number (S6): the sum is carry-checked and a
// total that overflows is too large for any file system.
func (r *Reader) checkSpace(dir string) error {
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil || sf.Bsize <= 0 {
		return nil // cannot tell: extraction will say ENOSPC if it comes to that
	}
	bs := uint64(sf.Bsize)
	hi, free := bits.Mul64(sf.Bavail, bs)
	if hi != 0 {
		free = math.MaxUint64
	}
	var need, carry uint64
	for i := range r.ix.entries {
		e := &r.ix.entries[i]
		n := (uint64(e.Size) + bs - 1) / bs * bs // Size <= MaxDataLen: no overflow
		if e.Dir {
			n = bs
		}
		if need, carry = bits.Add64(need, n, 0); carry != 0 {
			return &Error{File: dir, Err: ErrNoSpace, Msg: fmt.Sprintf("the bundle unpacks to more than %d bytes in %d entries (its entries share contents), more than any file system holds; it cannot be extracted",
				uint64(math.MaxUint64), len(r.ix.entries))}
		}
	}
	entries := uint64(len(r.ix.entries)) + 2 // the entries, the marker, the top directory
	if need > free {
		return &Error{File: dir, Err: ErrNoSpace, Msg: fmt.Sprintf("the bundle unpacks to %d bytes in %d entries, and its file system has %d bytes free; free some space or extract elsewhere",
			need, len(r.ix.entries), free)}
	}
	if sf.Files > 0 && entries > sf.Ffree {
		return &Error{File: dir, Err: ErrNoSpace, Msg: fmt.Sprintf("the bundle has %d entries, and its file system has %d inodes free; free some or extract elsewhere",
			len(r.ix.entries), sf.Ffree)}
	}
	return nil
}

// missingAncestor returns the topmost of dir and its ancestors that does
// not exist, or "" when dir exists.
func missingAncestor(dir string) string {
	top := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			return top
		}
		top = d
	}
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}

func (r *Reader) extractInto(ctx context.Context, tmp string, opt *ExtractOptions, over bool) (*ExtractResult, error) {
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	res := &ExtractResult{}
	wrap := func(e *Entry, err error) error {
		return r.errorf(&Error{Entry: e.Name, Err: err, Msg: "extracting"})
	}
	skip := r.skipList(opt.Skip)
	left := func(i int) bool { return skip != nil && skip[i] }
	// Directories first (a parent sorts before its children), then empty files.
	for i := range r.ix.entries {
		e := &r.ix.entries[i]
		switch {
		case left(i):
		case e.Dir:
			if err := root.Mkdir(e.Name, 0o700); err != nil && !(over && errors.Is(err, fs.ErrExist) && isDirIn(root, e.Name)) {
				return nil, wrap(e, err)
			}
			res.Dirs++
		case e.Size == 0:
			if err := writeNew(root, e, nil); err != nil {
				return nil, wrap(e, err)
			}
		}
	}
	progress := cumulative(r.ix.dataLen, opt.Progress)
	err = r.forEachBlob(ctx, opt.Jobs,
		func(b *blob, data []byte) error {
			if err := r.checkBlob(b, data); err != nil {
				return err
			}
			for _, i := range b.entries {
				if left(i) {
					continue
				}
				if err := writeNew(root, r.entry(i), data); err != nil {
					return wrap(r.entry(i), err)
				}
			}
			return nil
		},
		func(b *blob, rd io.Reader) error {
			// The first copy is written from the stream and kept open;
			// the others are copied from that descriptor, and its mode
			// is set last, so a mode without owner-read (0000, 0200)
			// cannot stop the copies (B7). Entries left out are not
			// written; a blob none of whose entries is written is read
			// all the same, so that its digest is checked.
			var kept []int
			for _, i := range b.entries {
				if !left(i) {
					kept = append(kept, i)
				}
			}
			if len(kept) == 0 {
				_, err := io.Copy(io.Discard, rd)
				return err
			}
			first := r.entry(kept[0])
			return createFile(root, first, os.O_RDWR, func(f *os.File) error {
				if _, err := io.Copy(f, rd); err != nil {
					return err
				}
				for _, i := range kept[1:] {
					if err := copyNew(root, r.entry(i), io.NewSectionReader(f, 0, first.Size)); err != nil {
						return wrap(r.entry(i), err)
					}
				}
				return nil
			})
		}, progress)
	if err != nil {
		return nil, err
	}
	// Files got their modes and times as they were written; directories
	// get theirs last, deepest first.
	for i := range r.ix.entries {
		switch e := &r.ix.entries[i]; {
		case left(i):
			res.Skipped++
			res.SkippedBytes += e.Size
		case !e.Dir:
			res.Files++
			res.Bytes += e.Size
		}
	}
	for i := len(r.ix.entries) - 1; i >= 0 && opt.Layers == nil; i-- { // a set's: stageLayers sets them
		if e := &r.ix.entries[i]; e.Dir && !left(i) {
			if err := setAttrs(root, e); err != nil {
				return nil, wrap(e, err)
			}
		}
	}
	return res, nil
}

// writeNew creates the file of e with data, its mode and mtime.
func writeNew(root *os.Root, e *Entry, data []byte) error {
	return createFile(root, e, os.O_WRONLY, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// copyNew creates the file of e with rd's bytes, its mode and mtime.
func copyNew(root *os.Root, e *Entry, rd io.Reader) error {
	return createFile(root, e, os.O_WRONLY, func(f *os.File) error {
		_, err := io.Copy(f, rd)
		return err
	})
}

// createFile creates a new file through root (opened with access, O_WRONLY
// or O_RDWR), fills it, then sets its mode and mtime on the open
// descriptor (no second path lookup).
func createFile(root *os.Root, e *Entry, access int, fill func(*os.File) error) error {
	f, err := root.OpenFile(e.Name, access|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(extractPerm(e.Mode))
	}
	if err == nil {
		err = futimens(f, e.ModTime)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// extractPerm is the mode an entry is given: its permission bits without
// group and other write (W8). Others never get to write a tree kbundle
// extracted, whatever the bundle says; the rest (including modes without
// owner access, as tar keeps them) is restored as recorded.
func extractPerm(m fs.FileMode) fs.FileMode { return m.Perm() &^ 0o022 }

// futimens sets f's access and modification times to t, in nanoseconds,
// from its seconds and nanoseconds (t.UnixNano overflows outside
// 1678..2262 and would give another date: B8).
func futimens(f *os.File, t time.Time) error {
	tt := unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
	ts := [2]unix.Timespec{tt, tt}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		// utimensat(fd, NULL, ts, 0) is futimens(fd, ts).
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e != 0 {
			serr = &os.PathError{Op: "futimens", Path: f.Name(), Err: e}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// setAttrs sets a directory's mtime and mode on its descriptor (the mtime
// first: a mode without owner access would stop the open).
func setAttrs(root *os.Root, e *Entry) error {
	f, err := root.Open(e.Name)
	if err != nil {
		return err
	}
	err = futimens(f, e.ModTime)
	if err == nil {
		err = f.Chmod(extractPerm(e.Mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
