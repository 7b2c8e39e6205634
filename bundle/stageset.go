package bundle

import (
	"context"
	"fmt"
	"os"
	"slices"
)

// stagedLayer is one bundle of a staged set.
type stagedLayer struct {
	r    *Reader
	path string // as the record names it ("": the Reader's name)
}

// stageLayers extracts opt.Layers' bundles over the staged base, in
// order (see ExtractOptions.Layers), and sets the merged view.
func (s *Staged) stageLayers(ctx context.Context, opt *ExtractOptions) error {
	base := s.layers[0].r
	view := map[string]SetEntry{}
	overlay(view, 0, base.ix.entries, opt.Unit)
	for opt.Layers != nil {
		r, path, err := opt.Layers()
		if err != nil {
			return err
		}
		if r == nil {
			break
		}
		li := len(s.layers)
		if li > MaxLayers {
			return &Error{File: path, Err: ErrTooLarge, Msg: fmt.Sprintf("more than %d layers in the set", MaxLayers)}
		}
		if err := s.overlayLayer(ctx, r, path, li, view, opt); err != nil {
			return err
		}
		s.layers = append(s.layers, stagedLayer{r: r, path: path})
	}
	s.view = sortedView(view)
	if opt.Skip != nil {
		// The record describes the tree as installed: the view without
		// what Skip left out, and the whole view's digest beside it.
		s.setContent = viewDigest(s.view)
		kept := s.view[:0:0]
		s.skipped, s.skippedBytes = 0, 0
		for _, e := range s.view {
			if skipped(opt.Skip, e.Name) {
				s.skipped++
				s.skippedBytes += e.Size
			} else {
				kept = append(kept, e)
			}
		}
		s.view = kept
	}
	if opt.Layers != nil {
		// Directories get their modes and times once every layer is in
		// (extractInto leaves a set's at 0700): a read-only directory of
		// one layer must not stop a later one from changing what it holds.
		if err := setDirAttrs(s.tmp, s.view); err != nil {
			return err
		}
	}
	if len(s.layers) > 1 || opt.Skip != nil {
		s.res = &ExtractResult{Skipped: s.skipped, SkippedBytes: s.skippedBytes}
		for i := range s.view {
			if e := &s.view[i]; e.Dir {
				s.res.Dirs++
			} else {
				s.res.Files++
				s.res.Bytes += e.Size
			}
		}
	}
	return nil
}

// viewDigest is the content digest of a merged view.
func viewDigest(view []SetEntry) Digest {
	es := make([]Entry, len(view))
	for i := range view {
		es[i] = view[i].Entry
	}
	return ContentDigestOf(es)
}

// overlayLayer extracts layer li (r) over the staged tree: what it
// displaces by the merged view's rules (overlay) is removed first, so
// that a cache unit comes whole from one layer, and a name that changed
// kind from a file to a directory or back comes from this layer with its
// whole subtree.
func (s *Staged) overlayLayer(ctx context.Context, r *Reader, path string, li int, view map[string]SetEntry, opt *ExtractOptions) error {
	if err := r.checkSpace(s.parent); err != nil {
		return err
	}
	root, err := os.OpenRoot(s.tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	gone := overlay(view, li, r.ix.entries, opt.Unit)
	for _, name := range slices.Backward(gone) { // what was below a directory first
		if skipped(opt.Skip, name) {
			continue // never written
		}
		if err := root.Remove(name); err != nil {
			return fmt.Errorf("cannot replace %s with %s's: %w", name, path, err)
		}
	}
	_, err = r.extractInto(ctx, s.tmp, opt, true)
	return err
}

// setDirAttrs sets the mode and mtime of view's directories in the tree
// at dir, deepest first.
func setDirAttrs(dir string, view []SetEntry) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for i := len(view) - 1; i >= 0; i-- {
		if e := &view[i]; e.Dir {
			if err := setAttrs(root, &e.Entry); err != nil {
				return fmt.Errorf("cannot set the mode of %s: %w", e.Name, err)
			}
		}
	}
	return nil
}

// isDirIn reports whether name is a directory (not a symlink) in root.
func isDirIn(root *os.Root, name string) bool {
	fi, err := root.Lstat(name)
	return err == nil && fi.IsDir()
}
