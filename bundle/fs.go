package bundle

import (
	"io"
	"io/fs"
	"path"
	"time"
)

var (
	_ fs.FS        = (*Reader)(nil)
	_ fs.ReadDirFS = (*Reader)(nil)
	_ fs.StatFS    = (*Reader)(nil)
)

// fileInfo implements fs.FileInfo and fs.DirEntry for an entry or the root.
type fileInfo struct{ e *Entry }

var rootEntry = &Entry{Name: ".", Dir: true, Mode: 0o755}

func (fi fileInfo) Name() string { return path.Base(fi.e.Name) }
func (fi fileInfo) Size() int64  { return fi.e.Size }
func (fi fileInfo) Mode() fs.FileMode {
	if fi.e.Dir {
		return fs.ModeDir | fi.e.Mode
	}
	return fi.e.Mode
}
func (fi fileInfo) Type() fs.FileMode          { return fi.Mode().Type() }
func (fi fileInfo) ModTime() time.Time         { return fi.e.ModTime }
func (fi fileInfo) IsDir() bool                { return fi.e.Dir }
func (fi fileInfo) Sys() any                   { return nil }
func (fi fileInfo) Info() (fs.FileInfo, error) { return fi, nil }
func (fi fileInfo) String() string             { return fs.FormatFileInfo(fi) }

// Info returns the entry as an fs.FileInfo.
func (e *Entry) Info() fs.FileInfo { return fileInfo{e} }

func (r *Reader) lookup(op, name string) (*Entry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return rootEntry, nil
	}
	i, ok := r.byName[name]
	if !ok {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return r.entry(i), nil
}

// Stat implements fs.StatFS.
func (r *Reader) Stat(name string) (fs.FileInfo, error) {
	e, err := r.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return fileInfo{e}, nil
}

// ReadDir implements fs.ReadDirFS: the directory's entries sorted by name.
func (r *Reader) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := r.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if !e.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	kids := r.children[name]
	out := make([]fs.DirEntry, len(kids))
	for i, k := range kids {
		out[i] = fileInfo{r.entry(k)}
	}
	return out, nil
}

// Open implements fs.FS. Reading a file checks its digest at the end.
func (r *Reader) Open(name string) (fs.File, error) {
	e, err := r.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if e.Dir {
		return &openDir{r: r, e: e}, nil
	}
	return &openFile{e: e, br: r.openBlob(e)}, nil
}

type openFile struct {
	e      *Entry
	br     *blobReader
	closed bool
}

func (f *openFile) Stat() (fs.FileInfo, error) { return fileInfo{f.e}, nil }
func (f *openFile) Read(p []byte) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.e.Name, Err: fs.ErrClosed}
	}
	return f.br.Read(p)
}
func (f *openFile) Close() error {
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.e.Name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

type openDir struct {
	r    *Reader
	e    *Entry
	read int
}

func (d *openDir) Stat() (fs.FileInfo, error) { return fileInfo{d.e}, nil }
func (d *openDir) Close() error               { return nil }
func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.e.Name, Err: fs.ErrInvalid}
}

// ReadDir implements fs.ReadDirFile.
func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	kids := d.r.children[d.e.Name]
	rest := kids[d.read:]
	if n > 0 && len(rest) > n {
		rest = rest[:n]
	}
	if n > 0 && len(rest) == 0 {
		return nil, io.EOF
	}
	out := make([]fs.DirEntry, len(rest))
	for i, k := range rest {
		out[i] = fileInfo{d.r.entry(k)}
	}
	d.read += len(rest)
	return out, nil
}

var _ fs.ReadFileFS = (*Reader)(nil)

// ReadFile implements fs.ReadFileFS (so that fs.ReadFile does not
// preallocate an entry's declared size before any content is checked).
func (r *Reader) ReadFile(name string) ([]byte, error) {
	e, err := r.lookup("readfile", name)
	if err != nil {
		return nil, err
	}
	if e.Dir {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrInvalid}
	}
	return r.ReadEntry(name)
}
