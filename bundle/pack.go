package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbundle/kbundle/internal/version"
)

// PackOptions tune Pack. The zero value is valid.
type PackOptions struct {
	Level       Level
	Jobs        int      // parallel readers and compressors; 0 means all cores
	SegmentSize int64    // 0 means DefaultSegmentSize
	Exclude     []string // path.Match globs, matched against the relative path and the base name
	Preset      string   // recorded as metadata "preset" when set
	Meta        map[string]string
	// Host describes the warm-up machine (host.* and gpu.* metadata, see
	// docs/FORMAT.md); the caller collects it, nil records none.
	Host map[string]string
	// ContentTime is recorded as metadata "content_time"; zero means the
	// newest mtime in the tree (never the wall clock: packing is
	// reproducible). The CLI sets it from SOURCE_DATE_EPOCH.
	ContentTime time.Time
	// Progress, when set, is called with bytes of content read so far.
	Progress func(done, total int64)
	// Trust adds the owners and groups the trust checks behind Writable
	// and Untrusted accept (nil: none), as load's will.
	Trust *TrustPolicy
}

// PackResult says what Pack did.
type PackResult struct {
	Path        string
	Files, Dirs int
	Unique      int   // distinct non-empty contents stored
	RawBytes    int64 // all regular files' sizes, duplicates included
	DataBytes   int64 // distinct content, uncompressed
	PackedBytes int64 // the bundle's size
	Segments    int
	// Skipped lists what was not stored, as "symlink a/b (points outside
	// the directory)", "socket s", ... (names through Printable, as in
	// Copied and Writable)
	Skipped []string
	// LeftOut lists kbundle's own files found in the tree and not packed,
	// with why: bundles (named *.kbundle, or starting with the kbundle
	// magic), kbundle's temporary files and trees (names holding
	// ".kbundle-tmp-") and the job scripts' lock files (*.kbundle.lock),
	// as "a/x.kbundle (a bundle)" (names through Printable). A bundle
	// inside a bundle is never what a cache needs (U5).
	LeftOut []string
	// Copied lists the symlinks stored as copies of the regular file they
	// point to inside the directory ("a/libz.so -> libz.so.1"); identical
	// contents are stored once, so a copy costs one index entry.
	Copied []string
	// Writable lists the packed directory and entries that someone other
	// than you (or root) could have written, with why ("a/b: mode 0664
	// lets others write it; ..."): whoever could write them chose part of
	// what the bundle holds, and the bundle, being yours, will be trusted
	// by load. Empty when the tree is private.
	Writable []string
	// Untrusted, when not nil, is why load would refuse the bundle as
	// written (its owner or mode, or a directory on the way to it):
	// the error CheckTrust returns.
	Untrusted error
	Digest    Digest
}

// Entries is the number of entries stored.
func (p *PackResult) Entries() int { return p.Files + p.Dirs }

// bigFile is the size above which a file is streamed rather than read whole.
const bigFile = 4 << 20

type packFile struct {
	rel      string
	src      string // the file whose content this entry holds: rel, or a symlink's target
	mode     fs.FileMode
	mtime    time.Time
	size     int64
	dev, ino uint64
}

// errChanged: a file was replaced, grew or shrank while it was packed.
var errChanged = errors.New("changed while being packed")

// Pack writes the tree under dir to the bundle out, atomically: a
// temporary file beside out, fsynced and renamed, the directory fsynced; no
// partial file is ever visible and the temporary file is removed on any
// failure. Output is deterministic: the same tree with the same options
// gives the same bytes whatever the number of jobs. out and its temporary
// files are never packed when out lies inside dir.
//
// The tree is read through directory descriptors (openat with O_NOFOLLOW,
// every file checked against what the walk saw), never by path: a file or
// directory replaced by a symlink while Pack runs is an error, never
// followed. A symlink whose target is a regular file inside dir (as Julia
// artifacts have: libz.so -> libz.so.1) is stored as a copy of that file
// (PackResult.Copied); other symlinks, devices, sockets and FIFOs are not
// stored and are listed in PackResult.Skipped.
func Pack(ctx context.Context, dir, out string, opt *PackOptions) (res *PackResult, err error) {
	if opt == nil {
		opt = &PackOptions{}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	for _, g := range opt.Exclude {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("bad exclude pattern %q: %w", g, err)
		}
	}
	pol := opt.Trust
	// Open the directory once; everything below is read relative to it.
	rootFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s is not a directory", dir)
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(rootFD)
	res = &PackResult{Path: out}
	// out must be compared in the terms of the real directory.
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	realOut := out
	if d, err := filepath.EvalSymlinks(filepath.Dir(out)); err == nil {
		realOut = filepath.Join(d, filepath.Base(out))
	}
	t := &treeWalk{root: realDir, out: realOut, exclude: opt.Exclude, pol: pol, res: res,
		kinds: map[string]byte{}, links: map[string]string{}, byRel: map[string]int{}}
	var st unix.Stat_t
	if err := unix.Fstat(rootFD, &st); err != nil {
		return nil, err
	}
	if msg := pol.statProblem("directory", dir, &st); msg != "" {
		res.Writable = append(res.Writable, dir+": "+msg)
	} else if err := checkTrustDir(dir, pol); err != nil {
		res.Writable = append(res.Writable, err.Error())
	}
	if err := t.walkDir(rootFD, ""); err != nil {
		return nil, inFile(err, dir)
	}
	t.resolveLinks()
	dirs, files := t.dirs, t.files
	meta, err := packMeta(dir, t.newest, opt)
	if err != nil {
		return nil, err
	}

	outDir := filepath.Dir(out)
	RemoveStale(outDir) // best effort, as in Stage
	tmp, err := newTempFile(outDir)
	if err != nil {
		return nil, fmt.Errorf("cannot write the bundle: %w", err)
	}
	// tmp stays open, and so locked (its proof of life for RemoveStale),
	// until it is renamed into place.
	defer func() {
		if err != nil {
			dropTemp(tmp.Name())
		}
		tmp.Close()
		untrack(tmp.Name())
	}()
	w := NewWriter(tmp, &WriterOptions{Level: opt.Level, Jobs: opt.Jobs, SegmentSize: opt.SegmentSize})
	for k, v := range meta {
		if err := w.SetMeta(k, v); err != nil {
			return nil, err
		}
	}
	for _, d := range dirs {
		if err := w.Mkdir(d.rel, d.mode, d.mtime); err != nil {
			return nil, inFile(err, dir)
		}
	}
	if err := writeFiles(ctx, w, rootFD, files, opt, res); err != nil {
		return nil, inFile(err, dir)
	}
	if err := w.Close(); err != nil {
		return nil, inFile(err, dir)
	}
	fi, err := finishTemp(ctx, tmp, 0o644) // asked for: bundlePerm is for what harvest and merge write unasked
	if err != nil {
		return nil, err
	}
	if err := renameTemp(tmp.Name(), out); err != nil {
		return nil, err
	}
	if err := syncDir(outDir); err != nil {
		return nil, err
	}
	res.Untrusted = CheckTrust(out, opt.Trust)
	res.Dirs = len(dirs)
	res.Files = len(files)
	res.DataBytes = w.dataLen
	res.Unique = len(w.blobs)
	res.Segments = len(w.packed)
	res.PackedBytes = fi.Size()
	res.Digest = w.Digest()
	return res, nil
}

// finishTemp makes a bundle written to the temporary file tmp ready to
// be renamed into place: mode perm (bundlePerm for a layer or merged
// base; 0644 for a packed bundle or a use record),
// synced; it returns its stat. It is the last chance to stop: cancelled
// here, the file in place stays and the temporary goes; after the rename
// the write has succeeded (S8).
func finishTemp(ctx context.Context, tmp *os.File, perm fs.FileMode) (os.FileInfo, error) {
	if err := tmp.Chmod(perm); err != nil {
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return nil, err
	}
	return fi, ctx.Err()
}

// bundlePerm is the mode of a layer or merged base holding what w
// wrote: 0644, less
// the group's read bit when a file of it is not readable by its group or
// a directory not searchable by it, and the same for others. A bundle is
// never more readable than what it holds was (X4 of the 2026-12-01b
// review: a file a job wrote 0600 into DEST was harvested into a 0644
// layer any local user could read); docs/FORMAT.md, "Threat model".
func bundlePerm(w *Writer) fs.FileMode {
	perm := fs.FileMode(0o644)
	for _, e := range w.entries {
		g, o := e.Mode&0o040 != 0, e.Mode&0o004 != 0
		if e.Dir {
			g, o = e.Mode&0o010 != 0, e.Mode&0o001 != 0
		}
		if !g {
			perm &^= 0o040
		}
		if !o {
			perm &^= 0o004
		}
	}
	return perm
}

// tempPrefix starts the names of the temporaries in out's directory
// (Pack's own among them), which the walk skips.
func tempPrefix(string) string { return tempTag }

// treeWalk lists a tree through directory descriptors.
type treeWalk struct {
	root, out string
	exclude   []string
	pol       *TrustPolicy
	res       *PackResult

	dirs, files []packFile
	newest      time.Time
	kinds       map[string]byte   // rel → 'd', 'f' or 'l', for resolving symlinks
	links       map[string]string // rel → target
	byRel       map[string]int    // regular file rel → index in files
	linkOrder   []string
}

func statTime(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

func sameFile(a *unix.Stat_t, f *packFile) bool {
	return uint64(a.Dev) == f.dev && a.Ino == f.ino
}

// enterDir records the directory pf (name in fd, abs on disk), opened
// without following a symlink and checked to be the one listed, and
// walks it.
func (t *treeWalk) enterDir(fd int, name, abs string, pf packFile) error {
	sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: abs, Err: err}
	}
	defer unix.Close(sub)
	var sst unix.Stat_t
	if err := unix.Fstat(sub, &sst); err != nil || !sameFile(&sst, &pf) {
		return &Error{Entry: pf.rel, Err: errChanged, Msg: "the directory was replaced"}
	}
	pf.mode, pf.mtime = fs.FileMode(sst.Mode&0o777), statTime(sst.Mtim)
	t.note(&pf, &sst, "directory", abs)
	t.dirs = append(t.dirs, pf)
	t.kinds[pf.rel] = 'd'
	return t.walkDir(sub, pf.rel)
}

// walkDir lists the directory open as fd, whose path relative to the root
// is rel ("" for the root), in lexical order, depth first.
func (t *treeWalk) walkDir(fd int, rel string) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	df := os.NewFile(uintptr(dup), filepath.Join(t.root, rel))
	names, err := df.Readdirnames(-1)
	df.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	outDir, tmpPre := filepath.Dir(t.out), tempPrefix(t.out)
	for _, name := range names {
		r := name
		if rel != "" {
			r = rel + "/" + name
		}
		if rel == "" && (name == InstalledMarker || name == HarvestedMarker) {
			continue // kbundle's own mark in a tree it extracted, not content
		}
		abs := filepath.Join(t.root, filepath.FromSlash(r))
		if abs == t.out || (filepath.Dir(abs) == outDir && strings.HasPrefix(name, tmpPre)) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since it was listed
			}
			return &os.PathError{Op: "lstat", Path: abs, Err: err}
		}
		kind := st.Mode & unix.S_IFMT
		if excluded(r, t.exclude) {
			continue
		}
		if why := kbundleFile(fd, name, &st); why != "" {
			t.res.LeftOut = append(t.res.LeftOut, Printable(r)+" ("+why+")")
			continue
		}
		if err := checkName(r); err != nil {
			return inFile(err, abs)
		}
		pf := packFile{rel: r, src: r, mode: fs.FileMode(st.Mode & 0o777), mtime: statTime(st.Mtim),
			size: st.Size, dev: uint64(st.Dev), ino: st.Ino}
		switch kind {
		case unix.S_IFDIR:
			if err := t.enterDir(fd, name, abs, pf); err != nil {
				return err
			}
		case unix.S_IFREG:
			t.note(&pf, &st, "file", abs)
			t.byRel[r] = len(t.files)
			t.files = append(t.files, pf)
			t.kinds[r] = 'f'
			t.res.RawBytes += pf.size
		case unix.S_IFLNK:
			target, err := readlinkat(fd, name)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				return &Error{Entry: r, Err: errChanged, Msg: "the symlink was replaced or removed"}
			}
			if err != nil {
				return &os.PathError{Op: "readlink", Path: abs, Err: err}
			}
			t.kinds[r] = 'l'
			t.links[r] = target
			t.linkOrder = append(t.linkOrder, r)
		default:
			t.res.Skipped = append(t.res.Skipped, kindName(fs.FileMode(0).Type()|modeType(kind))+" "+Printable(r))
		}
	}
	return nil
}

// kbundleFile says why the entry name of the directory open as fd (stat
// st) is one of kbundle's own files, never packed, or returns "".
func kbundleFile(fd int, name string, st *unix.Stat_t) string {
	switch {
	case strings.Contains(name, tempTag), strings.Contains(name, newTag):
		return "a temporary of kbundle's"
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && strings.HasSuffix(name, ".kbundle.d"):
		return "a bundle set's folder of layers, claims and use records"
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return ""
	case strings.HasSuffix(name, ".kbundle"):
		return "a bundle"
	case strings.HasSuffix(name, ".kbundle.lock"):
		return "a lock file of kbundle's job scripts"
	case st.Size < headerSize+trailerSize:
		return ""
	}
	f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "" // the read will say why, if it comes to that
	}
	defer unix.Close(f)
	var m [8]byte
	if n, err := unix.Pread(f, m[:], 0); err == nil && n == len(m) && m == magic {
		return "a bundle"
	}
	return ""
}

// note records the newest mtime and whether someone else could have
// written the entry.
func (t *treeWalk) note(pf *packFile, st *unix.Stat_t, what, abs string) {
	if pf.mtime.After(t.newest) {
		t.newest = pf.mtime
	}
	if msg := t.pol.statProblem(what, abs, st); msg != "" {
		t.res.Writable = append(t.res.Writable, Printable(pf.rel)+": "+msg)
	}
}

func modeType(kind uint32) fs.FileMode {
	switch kind {
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	}
	return fs.ModeIrregular
}

// resolveLinks stores each symlink that leads, inside the tree, to a
// regular file as a copy of it, and lists the others as skipped. The
// target is resolved by name within the walked tree, never through the
// file system, so it can neither leave the tree nor change meanwhile.
func (t *treeWalk) resolveLinks() {
	for _, l := range t.linkOrder {
		target, why := t.resolve(l)
		if why != "" {
			t.res.Skipped = append(t.res.Skipped, "symlink "+Printable(l)+" ("+why+")")
			continue
		}
		f := t.files[t.byRel[target]]
		f.rel = l
		t.files = append(t.files, f)
		t.res.RawBytes += f.size
		t.res.Copied = append(t.res.Copied, Printable(l)+" -> "+Printable(t.links[l]))
	}
}

// resolve follows the symlink rel inside the tree and returns the regular
// file it leads to, or why it does not lead to one.
func (t *treeWalk) resolve(rel string) (string, string) {
	cur := strings.Split(path.Dir(rel), "/")
	if path.Dir(rel) == "." {
		cur = nil
	}
	comps := strings.Split(t.links[rel], "/")
	if strings.HasPrefix(t.links[rel], "/") {
		return "", "absolute target " + t.links[rel]
	}
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", "points outside the directory"
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := strings.Join(append(slices.Clone(cur), c), "/")
		switch t.kinds[p] {
		case 'd':
			cur = append(cur, c)
		case 'f':
			if len(comps) > 0 && strings.Trim(strings.Join(comps, ""), "./") != "" {
				return "", "a file used as a directory"
			}
			return p, ""
		case 'l':
			if hops++; hops > maxLinks {
				return "", "too many levels of symlinks"
			}
			next := t.links[p]
			if strings.HasPrefix(next, "/") {
				return "", "absolute target " + next
			}
			comps = append(strings.Split(next, "/"), comps...)
		default:
			return "", "target " + p + " is not packed (missing, excluded or special)"
		}
	}
	return "", "points to a directory"
}

func kindName(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t&fs.ModeNamedPipe != 0:
		return "fifo"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

func excluded(rel string, globs []string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, rel); ok {
			return true
		}
		if ok, _ := path.Match(g, path.Base(rel)); ok {
			return true
		}
	}
	return false
}

// Creator names this kbundle for the "creator" metadata: "kbundle "
// and the version `kbundle version` prints.
func Creator() string { return "kbundle " + version.String() }

func packMeta(dir string, newest time.Time, opt *PackOptions) (map[string]string, error) {
	meta := map[string]string{}
	for k, v := range opt.Host {
		meta[k] = v
	}
	for k, v := range opt.Meta {
		meta[k] = v
	}
	ct := newest
	if !opt.ContentTime.IsZero() {
		ct = opt.ContentTime
	}
	if ct.IsZero() {
		ct = time.Unix(0, 0)
	}
	meta[MetaOrigin] = dir
	meta[MetaContentTime] = ct.UTC().Format(time.RFC3339Nano)
	meta[MetaCreator] = Creator()
	if opt.Preset != "" {
		meta[MetaPreset] = opt.Preset
	}
	return meta, nil
}

type readResult struct {
	data   []byte
	digest Digest
	err    error
}

// writeFiles adds files in data order (extension, then name), read by a
// pool of workers with a bounded window and consumed in order, so the
// output does not depend on the number of workers.
func writeFiles(ctx context.Context, w *Writer, rootFD int, files []packFile, opt *PackOptions, res *PackResult) error {
	order := slices.Clone(files)
	slices.SortStableFunc(order, func(a, b packFile) int {
		if c := strings.Compare(path.Ext(a.rel), path.Ext(b.rel)); c != 0 {
			return c
		}
		return strings.Compare(a.rel, b.rel)
	})
	jobs := Jobs(opt.Jobs)
	// slots bounds the files read but not yet consumed (memory).
	slots := make(chan struct{}, 16*jobs)
	results := make([]chan readResult, len(order))
	for i := range results {
		results[i] = make(chan readResult, 1)
	}
	todo := make(chan int)
	stop := make(chan struct{})
	defer close(stop)
	for range jobs {
		go func() {
			for i := range todo {
				results[i] <- readOne(ctx, rootFD, order[i])
			}
		}()
	}
	go func() {
		defer close(todo)
		for i := range order {
			select {
			case slots <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case todo <- i:
			case <-stop:
				return
			}
		}
	}()
	var done int64
	for i, f := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := <-results[i]
		<-slots
		if r.err != nil {
			return r.err
		}
		var err error
		if r.data != nil || f.size == 0 {
			err = w.writeFile(f.rel, f.mode, f.mtime, r.data, r.digest)
		} else {
			err = copyFile(ctx, w, rootFD, f, r.digest)
		}
		if err != nil {
			return err
		}
		done += f.size
		if opt.Progress != nil {
			opt.Progress(done, res.RawBytes)
		}
	}
	return nil
}

// openAt opens the regular file rel (slash-separated, relative to the
// directory rootFD) without following any symlink on the way, and checks
// that it is the file the walk saw (device and inode, size).
func openAt(rootFD int, f packFile) (*os.File, error) {
	fd := rootFD
	comps := strings.Split(f.src, "/")
	for _, c := range comps[:len(comps)-1] {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != rootFD {
			unix.Close(fd)
		}
		if err != nil {
			return nil, changed(f, err)
		}
		fd = next
	}
	// O_NONBLOCK: a FIFO swapped in must not hang us; O_NOFOLLOW: nor may a
	// symlink be followed.
	nfd, err := unix.Openat(fd, comps[len(comps)-1], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if fd != rootFD {
		unix.Close(fd)
	}
	if err != nil {
		return nil, changed(f, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || !sameFile(&st, &f) || st.Size != f.size {
		unix.Close(nfd)
		return nil, &Error{Entry: f.rel, Err: errChanged, Msg: "replaced, grown or shrunk since the tree was listed; pack again when nothing writes the cache"}
	}
	return os.NewFile(uintptr(nfd), f.src), nil
}

func changed(f packFile, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
		return &Error{Entry: f.rel, Err: errChanged, Msg: "replaced or removed since the tree was listed (" + err.Error() + ")"}
	}
	return &Error{Entry: f.rel, Err: err, Msg: "cannot open"}
}

// ctxReader reads from r until ctx is cancelled: a big file's copy stops
// within one read of a signal, not when the file is done (S8).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func readOne(ctx context.Context, rootFD int, f packFile) readResult {
	fh, err := openAt(rootFD, f)
	if err != nil {
		return readResult{err: err}
	}
	defer fh.Close()
	if f.size > bigFile {
		h := newHasher()
		if _, err := io.Copy(h, ctxReader{ctx, fh}); err != nil {
			return readResult{err: err}
		}
		return readResult{digest: hasherDigest(h)}
	}
	data := make([]byte, f.size, f.size+1)
	n, err := io.ReadFull(fh, data[:f.size+1])
	if err != io.ErrUnexpectedEOF && err != io.EOF && err != nil {
		return readResult{err: err}
	}
	if int64(n) != f.size {
		return readResult{err: &Error{Entry: f.rel, Err: errChanged, Msg: "the file changed size while being packed"}}
	}
	return readResult{data: data[:n], digest: sum(data[:n])}
}

func copyFile(ctx context.Context, w *Writer, rootFD int, f packFile, d Digest) error {
	fh, err := openAt(rootFD, f)
	if err != nil {
		return err
	}
	defer fh.Close()
	err = w.CopyFile(f.rel, f.mode, f.mtime, f.size, d, ctxReader{ctx, fh})
	if err != nil && ctx.Err() != nil {
		return ctx.Err() // stopped, not a file that changed
	}
	return err
}
