package bundle

import (
	"fmt"
	"os"
	"path"
)

// The tree rule (docs/FORMAT.md, "Names"): every entry's parent is a
// directory entry. The reader refuses a bundle that breaks it (checkTree);
// the Writer refuses the entry that would (Writer.treeConflict), and
// WriteLayer and MergeSet read back what they wrote before they publish
// it (verifyWritten). A set's merged view keeps to it too, by the
// kind-change rule of docs/FORMAT.md, "Merged view" (dropKindChanges).

// dropKindChanges applies the kind-change rule of a set's merged view
// before a later layer's entries are put over view: where the layer and
// view disagree about a name being a file or a directory, the layer wins
// with the whole subtree. A file x of the layer drops view's directory x
// and everything below it; a directory x of the layer drops view's file
// x. It returns the names dropped (files and directories), unsorted.
//
// view must be a tree, and entries one (a bundle's): the result of
// putting entries over what is left is then a tree too. Only a directory
// of view can have names below it, so the subtrees are found in one pass
// over view, and only when a directory became a file.
func dropKindChanges(view map[string]SetEntry, entries []Entry) []string {
	var gone []string
	var subtrees map[string]bool // view's directories that became files
	for i := range entries {
		e := &entries[i]
		se, ok := view[e.Name]
		if !ok || se.Dir == e.Dir {
			continue
		}
		if se.Dir {
			if subtrees == nil {
				subtrees = map[string]bool{}
			}
			subtrees[e.Name] = true
			continue
		}
		delete(view, e.Name) // a file that became a directory
		gone = append(gone, e.Name)
	}
	if subtrees == nil {
		return gone
	}
	for n := range view {
		for p := n; p != "."; p = path.Dir(p) {
			if subtrees[p] {
				delete(view, n)
				gone = append(gone, n)
				break
			}
		}
	}
	return gone
}

// verifyWritten reads back the bundle just written to f (complete and
// fsynced, size bytes) with the reader's own checks of its header,
// trailer and index (every rule of docs/FORMAT.md a reader applies before
// it reads a content), and checks that its entries are those written
// (content digest want): WriteLayer and MergeSet publish nothing that a
// reader would refuse. target names what it was to become, for the error.
func verifyWritten(f *os.File, size int64, want Digest, target string) error {
	r, err := newReader(f, size, f.Name())
	if err == nil && ContentDigestOf(r.ix.entries) != want {
		err = &Error{File: f.Name(), Err: ErrChecksum, Msg: "its index does not hold the entries written"}
	}
	if err != nil {
		return fmt.Errorf("cannot publish %s: the bundle written does not read back, nothing was changed (a bug in kbundle, please report it): %w", target, err)
	}
	return nil
}
