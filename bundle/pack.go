package bundle

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kbundle/kbundle/internal/hostinfo"
)

// PackOptions tune Pack. The zero value is valid.
type PackOptions struct {
	Level       Level
	Jobs        int      // parallel readers and compressors; 0 means all cores
	SegmentSize int64    // 0 means DefaultSegmentSize
	Exclude     []string // path.Match globs, matched against the relative path and the base name
	Preset      string   // recorded as metadata "preset" when set
	Meta        map[string]string
	// Host describes the warm-up machine; nil means this machine
	// (internal/hostinfo).
	Host map[string]string
	// Progress, when set, is called with bytes of content read so far.
	Progress func(done, total int64)
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
	// Skipped lists what was not stored, as "symlink a/b", "socket s", ...
	Skipped []string
	Digest  Digest
}

// Entries is the number of entries stored.
func (p *PackResult) Entries() int { return p.Files + p.Dirs }

// bigFile is the size above which a file is streamed rather than read whole.
const bigFile = 4 << 20

type packFile struct {
	rel   string
	abs   string
	mode  fs.FileMode
	mtime time.Time
	size  int64
}

// Pack writes the tree under dir to the bundle out, atomically: a
// temporary file beside out, fsynced and renamed, the directory fsynced; no
// partial file is ever visible and the temporary file is removed on any
// failure. Output is deterministic: the same tree with the same options
// gives the same bytes whatever the number of jobs. out and its temporary
// files are never packed when out lies inside dir. Symlinks, devices,
// sockets and FIFOs are not stored: each is listed in PackResult.Skipped.
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
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	res = &PackResult{Path: out}
	// Walk the real directory: WalkDir does not descend into a symlinked
	// root (it would pack nothing), and out must be compared in its terms.
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	realOut := out
	if d, err := filepath.EvalSymlinks(filepath.Dir(out)); err == nil {
		realOut = filepath.Join(d, filepath.Base(out))
	}
	dirs, files, newest, err := walk(realDir, realOut, opt.Exclude, res)
	if err != nil {
		return nil, err
	}
	meta, err := packMeta(dir, newest, opt)
	if err != nil {
		return nil, err
	}

	outDir := filepath.Dir(out)
	RemoveStale(outDir) // best effort, as in Stage
	tempsMu.Lock()
	tmp, err := os.CreateTemp(outDir, tempPattern(filepath.Base(out)))
	if err == nil {
		temps[tmp.Name()] = false
	}
	tempsMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cannot write the bundle: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
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
	if err := writeFiles(ctx, w, files, opt, res); err != nil {
		return nil, inFile(err, dir)
	}
	if err := w.Close(); err != nil {
		return nil, inFile(err, dir)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	st, err := tmp.Stat()
	if err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return nil, err
	}
	if err := syncDir(outDir); err != nil {
		return nil, err
	}
	res.Dirs = len(dirs)
	res.Files = len(files)
	res.DataBytes = w.dataLen
	res.Unique = len(w.blobs)
	res.Segments = len(w.packed)
	res.PackedBytes = st.Size()
	res.Digest = w.Digest()
	return res, nil
}

func tempPrefix(out string) string { return "." + filepath.Base(out) + tempTag }

// walk lists the directories and regular files under dir, in lexical
// order, skipping out, its temporary files and excluded paths.
func walk(dir, out string, exclude []string, res *PackResult) (dirs, files []packFile, newest time.Time, err error) {
	outDir, tmpPre := filepath.Dir(out), tempPrefix(out)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if p == out || (filepath.Dir(p) == outDir && strings.HasPrefix(d.Name(), tmpPre)) {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, exclude) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if err := checkName(rel); err != nil {
			return inFile(err, p)
		}
		t := d.Type()
		if !t.IsDir() && !t.IsRegular() {
			res.Skipped = append(res.Skipped, kindName(t)+" "+rel)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		pf := packFile{rel: rel, abs: p, mode: info.Mode().Perm(), mtime: info.ModTime(), size: info.Size()}
		if pf.mtime.After(newest) {
			newest = pf.mtime
		}
		if t.IsDir() {
			dirs = append(dirs, pf)
		} else {
			files = append(files, pf)
			res.RawBytes += pf.size
		}
		return nil
	})
	return dirs, files, newest, err
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

// Creator names this kbundle for the "creator" metadata.
func Creator() string {
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return "kbundle " + v
}

func packMeta(dir string, newest time.Time, opt *PackOptions) (map[string]string, error) {
	meta := map[string]string{}
	host := opt.Host
	if host == nil {
		host = hostinfo.Collect()
	}
	for k, v := range host {
		meta[k] = v
	}
	for k, v := range opt.Meta {
		meta[k] = v
	}
	ct := newest
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
		}
		ct = time.Unix(n, 0)
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
func writeFiles(ctx context.Context, w *Writer, files []packFile, opt *PackOptions, res *PackResult) error {
	order := slices.Clone(files)
	slices.SortStableFunc(order, func(a, b packFile) int {
		if c := strings.Compare(path.Ext(a.rel), path.Ext(b.rel)); c != 0 {
			return c
		}
		return strings.Compare(a.rel, b.rel)
	})
	jobs := opt.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
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
				results[i] <- readOne(order[i])
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
			err = copyFile(w, f, r.digest)
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

func readOne(f packFile) readResult {
	if f.size > bigFile {
		fh, err := os.Open(f.abs)
		if err != nil {
			return readResult{err: err}
		}
		defer fh.Close()
		h := newHasher()
		if _, err := io.Copy(h, fh); err != nil {
			return readResult{err: err}
		}
		return readResult{digest: hasherDigest(h)}
	}
	data, err := os.ReadFile(f.abs)
	if err != nil {
		return readResult{err: err}
	}
	if int64(len(data)) != f.size {
		return readResult{err: &Error{Entry: f.rel, Err: io.ErrUnexpectedEOF, Msg: "the file changed while being packed"}}
	}
	if data == nil {
		data = []byte{}
	}
	return readResult{data: data, digest: sum(data)}
}

func copyFile(w *Writer, f packFile, d Digest) error {
	fh, err := os.Open(f.abs)
	if err != nil {
		return err
	}
	defer fh.Close()
	return w.CopyFile(f.rel, f.mode, f.mtime, f.size, d, fh)
}
