package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A set is a base bundle at PATH plus delta layers in PATH.d, loaded as
// one: later layers win (docs/FORMAT.md, "Sets"). Nothing here takes a
// lock: layers are published with link(2), which fails when the name
// exists (an exclusive create that also works where O_EXCL across nodes
// does not), and merged bases with rename(2).

// MaxLayers bounds the delta layers of one set: each is one open, on
// rank 0 only. A harvest refuses to add one more (run kbundle merge).
const MaxLayers = 32

// MetaSetFolded is the base's metadata key naming the highest layer
// number merged into it: new layers are numbered above it. Readers skip
// the layers up to it unless the base has MetaSetFoldedLayers.
const MetaSetFolded = "set_folded"

// MetaSetFoldedLayers is the base's metadata key naming the layers merged
// into it that were in the layer directory when it was written (file
// names, ascending, comma-separated; empty: none): readers skip exactly
// these. A layer linked after the merge listed the set is not among
// them, whatever its number, and stays in view.
const MetaSetFoldedLayers = "set_folded_layers"

// MaxFoldedLayers bounds MetaSetFoldedLayers (a metadata value is at most
// 64 KiB): a merge that would name more refuses, until the next merge
// past the grace has removed them.
const MaxFoldedLayers = 2000

// A setFold is what a base folds: the layers it names, or (names nil: a
// base written before MetaSetFoldedLayers) every layer numbered up to
// top.
type setFold struct {
	top   int
	names map[string]bool
}

// parseFold reads a base's fold from its metadata (file: its path, for
// errors).
func parseFold(meta map[string]string, file string) (setFold, error) {
	var f setFold
	if v := meta[MetaSetFolded]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, &Error{File: file, Err: ErrFormat, Msg: fmt.Sprintf("metadata %s %q is not a layer number", MetaSetFolded, v)}
		}
		f.top = n
	}
	if v, ok := meta[MetaSetFoldedLayers]; ok {
		f.names = map[string]bool{}
		for _, n := range strings.Split(v, ",") {
			if n == "" && v == "" {
				break
			}
			if !layerRe.MatchString(n) {
				return f, &Error{File: file, Err: ErrFormat, Msg: fmt.Sprintf("metadata %s names %q, which is no layer name", MetaSetFoldedLayers, n)}
			}
			f.names[n] = true
		}
	}
	return f, nil
}

// skips reports whether a reader of the base skips layer l (folded).
func (f setFold) skips(l SetLayer) bool {
	if f.names == nil {
		return l.Seq <= f.top
	}
	return f.names[filepath.Base(l.Path)]
}

// ErrNoSet: neither a base nor a layer exists at the path.
var ErrNoSet = errors.New("no bundle set")

// layerRe is a layer's name: its number and a prefix of its content digest.
var layerRe = regexp.MustCompile(`^([0-9]{6})-([0-9a-f]{16})\.kbundle$`)

// LayerDir is the directory of the set's delta layers.
func LayerDir(path string) string { return path + ".d" }

// A SetLayer is one bundle of a set.
type SetLayer struct {
	Path string
	Seq  int // 0: the base
}

// ListLayers lists the delta layers in LayerDir(path) numbered above
// folded, ascending; names that are not layers (temporaries) are left out.
// A missing directory is no layer.
func ListLayers(path string, folded int) ([]SetLayer, error) {
	dir := LayerDir(path)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []SetLayer
	for _, de := range des {
		m := layerRe.FindStringSubmatch(de.Name())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n > folded {
			out = append(out, SetLayer{Path: filepath.Join(dir, de.Name()), Seq: n})
		}
	}
	slices.SortFunc(out, func(a, b SetLayer) int { return a.Seq - b.Seq })
	return out, nil
}

// An OpenedSet is a set's bundles, each opened once, base first.
type OpenedSet struct {
	Path   string
	Layers []SetLayer    // Layers[i] is Readers[i]; the base, if any, first
	Read   []*ReadCloser // in the order of Layers
	fold   setFold       // the base's
	folded []SetLayer    // the layers listed that the base folds
}

// Close closes every bundle.
func (s *OpenedSet) Close() error {
	var err error
	for _, r := range s.Read {
		err = errors.Join(err, r.Close())
	}
	return err
}

// HasDeltas reports whether the set is more than one bundle.
func (s *OpenedSet) HasDeltas() bool { return len(s.Read) > 1 }

// OpenSet opens the set at path: the base first (its descriptor held, so
// that a merge renaming a new base over it changes nothing for this
// reader), then the layers it does not fold (MetaSetFoldedLayers, else
// those above its MetaSetFolded). Each bundle
// is opened with opt (Trusted: each passes the trust rules). A missing
// set (no base, no layer directory) is the base's fs.ErrNotExist error,
// as for a single bundle; a layer directory without base or layer
// matches ErrNoSet. A layer removed between the
// listing and its open (a merge past its grace) makes OpenSet list again,
// once.
func OpenSet(path string, opt *OpenOptions) (*OpenedSet, error) {
	for try := 0; ; try++ {
		s, err := openSet(path, opt)
		if err == nil || try > 0 || !errors.Is(err, errLayerGone) {
			return s, err
		}
	}
}

var errLayerGone = errors.New("layer removed while opening the set")

func openSet(path string, opt *OpenOptions) (*OpenedSet, error) {
	s := &OpenedSet{Path: path}
	base, err := Open(path, opt)
	baseErr := err
	switch {
	case err == nil:
		s.Layers = append(s.Layers, SetLayer{Path: path})
		s.Read = append(s.Read, base)
		if s.fold, err = parseFold(base.Meta(), path); err != nil {
			base.Close()
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	all, err := ListLayers(path, 0)
	if err != nil {
		s.Close()
		return nil, err
	}
	var layers []SetLayer
	for _, l := range all {
		if s.fold.skips(l) {
			s.folded = append(s.folded, l)
		} else {
			layers = append(layers, l)
		}
	}
	if len(layers) > MaxLayers {
		s.Close()
		return nil, &Error{File: LayerDir(path), Err: ErrTooLarge, Msg: fmt.Sprintf("%d layers (limit %d); run kbundle merge %s", len(layers), MaxLayers, path)}
	}
	for _, l := range layers {
		r, err := Open(l.Path, opt)
		if err != nil {
			s.Close()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, errLayerGone
			}
			return nil, err
		}
		s.Layers = append(s.Layers, l)
		s.Read = append(s.Read, r)
	}
	if len(s.Read) == 0 {
		if _, lerr := os.Lstat(LayerDir(path)); errors.Is(lerr, fs.ErrNotExist) {
			return nil, baseErr // a missing file, said as for any bundle
		}
		return nil, &Error{File: path, Err: ErrNoSet, Msg: "neither a bundle nor a layer exists"}
	}
	return s, nil
}

// A SetEntry is one entry of a set's merged view.
type SetEntry struct {
	Entry
	Layer int // index in Layers
}

// Merged is the set's merged view, sorted by name: a later layer's entry
// wins over an earlier one's of the same name, and when unit is not nil,
// a later layer holding any file of a cache unit (unit(name), "" for
// none) drops every file of that unit that earlier layers hold, so that
// a unit always comes whole from one layer. Where a later layer and the
// earlier ones disagree about a name being a file or a directory, the
// later layer wins with the whole subtree (a file x drops an earlier
// directory x and everything below it, a directory x an earlier file x):
// the view is always a tree.
func (s *OpenedSet) Merged(unit func(name string) string) []SetEntry {
	view := map[string]SetEntry{}
	for li, r := range s.Read {
		overlay(view, li, r.Entries(), unit)
	}
	return sortedView(view)
}

// overlay puts layer li's entries over view by Merged's rule and returns
// the names of the files of earlier layers it displaced (by name, by
// cache unit or by a change of kind) and of the directories it displaced
// (a change of kind: dropKindChanges), sorted (a directory before what
// was below it).
func overlay(view map[string]SetEntry, li int, entries []Entry, unit func(string) string) []string {
	var gone []string
	if unit != nil && len(view) > 0 {
		units := map[string]bool{}
		for _, e := range entries {
			if u := unit(e.Name); u != "" && !e.Dir {
				units[u] = true
			}
		}
		for n, se := range view {
			if !se.Dir && units[unit(n)] {
				delete(view, n)
				gone = append(gone, n)
			}
		}
	}
	gone = append(gone, dropKindChanges(view, entries)...)
	for _, e := range entries {
		if se, ok := view[e.Name]; ok && !se.Dir {
			gone = append(gone, e.Name)
		}
		view[e.Name] = SetEntry{Entry: e, Layer: li}
	}
	slices.Sort(gone)
	return slices.Compact(gone)
}

// sortedView is view's entries sorted by name.
func sortedView(view map[string]SetEntry) []SetEntry {
	out := make([]SetEntry, 0, len(view))
	for _, e := range view {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b SetEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ContentDigest is the content digest of the merged view (unit: as for
// Merged).
func (s *OpenedSet) ContentDigest(unit func(string) string) Digest {
	m := s.Merged(unit)
	es := make([]Entry, len(m))
	for i := range m {
		es[i] = m[i].Entry
	}
	return ContentDigestOf(es)
}

// LayerOptions tune WriteLayer and MergeSet.
type LayerOptions struct {
	Writer WriterOptions
	// Trust is the policy of the trust check of the result (reported);
	// WriteLayer also numbers its layer above the layers and claims of
	// the owners it trusts only (docs/FORMAT.md, "Publishing").
	Trust *TrustPolicy
	// Failpoint, when not nil, is called by WriteLayer at three steps, for
	// tests that kill or hold the writer there: "written" (the temporary
	// complete and fsynced, not yet linked), "claimed" (its number's claim
	// linked, not its layer; not for a set's first bundle, its base) and
	// "published" (linked to its name, the temporary's name not yet
	// removed).
	Failpoint func(step string)
	// step, when not nil, is called at every step of the protocol
	// (docs/FORMAT.md, "The protocol"), for the tests that run other
	// writers and merges in between (set_race_test.go). WriteLayer:
	// Failpoint's, and "listed" (the set listed, its number chosen,
	// nothing linked yet; again for each number it tries) and "claimed"
	// (its number's claim linked, not its layer). MergeSet:
	// "merge-opened" (the set read) and "merge-written" (the new base
	// written, not installed).
	step func(string)
}

// A Published says where WriteLayer or MergeSet put a bundle.
type Published struct {
	Path      string
	Seq       int  // 0: the base
	Base      bool // no set existed: the layer became the set's base
	Digest    Digest
	Content   Digest
	Entries   int
	Size      int64
	Untrusted error // CheckTrust of the result
}

// WriteLayer writes a new layer of the set at path: fill adds its
// entries to w; the bundle is written to a locked temporary beside path,
// fsynced, and published with link(2): as the base when no set exists
// (neither path nor a layer or claim in LayerDir(path)), else as the
// next layer number in LayerDir(path), taking the next free number when
// another writer took one first (publishLayer). It
// never replaces a file: a concurrent writer loses nothing. On error
// nothing is published and the temporary is removed.
func WriteLayer(ctx context.Context, path string, opt *LayerOptions, fill func(w *Writer) error) (_ *Published, err error) {
	if opt == nil {
		opt = &LayerOptions{}
	}
	dir := filepath.Dir(path)
	RemoveStale(dir) // best effort, as in Pack
	tmp, err := newTempFile(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot write a layer of %s: %w", path, err)
	}
	defer func() {
		dropTemp(tmp.Name()) // published by a link: the temporary name goes
		tmp.Close()
	}()
	w := NewWriter(tmp, &opt.Writer)
	if err := fill(w); err != nil {
		w.fail(err)
		w.Close()
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	fi, err := finishTemp(ctx, tmp, bundlePerm(w))
	if err != nil {
		return nil, err
	}
	content := ContentDigestOf(sortedEntries(w))
	if err := verifyWritten(tmp, fi.Size(), content, path); err != nil {
		return nil, err
	}
	opt.failpoint("written")
	p := &Published{Digest: w.Digest(), Content: content, Entries: len(w.entries), Size: fi.Size()}
	if p.Base, err = publishBase(tmp.Name(), path, opt); err != nil {
		return nil, err
	}
	if p.Base {
		p.Path = path
	} else if p.Path, p.Seq, err = publishLayer(tmp.Name(), path, content.String()[:16], opt); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(p.Path)); err != nil {
		return nil, err
	}
	opt.failpoint("published")
	p.Untrusted = CheckTrust(p.Path, opt.Trust)
	return p, nil
}

func (o *LayerOptions) failpoint(step string) {
	if o.step != nil {
		o.step(step)
	}
	if o.Failpoint != nil && (step == "written" || step == "claimed" || step == "published") {
		o.Failpoint(step)
	}
}

// publishBase links tmp as the base of the set at path when no set
// exists there: neither path nor a layer or claim in LayerDir(path). A
// set whose base is gone but whose layers remain (a scratch purge, a
// user's rm) gets a layer above them, not a base below them (H7). false,
// nil: publish a layer.
func publishBase(tmp, path string, opt *LayerOptions) (bool, error) {
	des, err := os.ReadDir(LayerDir(path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("cannot publish a layer of %s: %w", path, err)
	}
	for _, de := range des {
		if layerRe.MatchString(de.Name()) || claimRe.MatchString(de.Name()) {
			return false, nil
		}
	}
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	}
	opt.failpoint("listed")
	err = linkTemp(tmp, path)
	if errors.Is(err, fs.ErrExist) {
		return false, nil // another writer's base, just now
	}
	if err != nil {
		return false, fmt.Errorf("cannot publish %s: %w", path, err)
	}
	return true, nil
}

// MaxLayerSeq is the highest layer number (six digits).
const MaxLayerSeq = 999999

// publishLayer links tmp as the next free layer of the set at path, named
// with tag (16 hex digits of its content digest) (docs/FORMAT.md, "The
// protocol"): claim a number above the base's fold, then link the layer
// to it. The layer is in the set from its link on, whatever its number:
// a base skips only the layers it names as folded (MetaSetFoldedLayers),
// so a merge that listed the set before the link leaves it in view.
//
// A layer's name holds its content digest, so link(2) to it fails only
// for a writer of the same content: the number itself is taken first,
// with an empty claim file, claimName, linked from a temporary of ours
// (exclusive whatever the contents). A number whose claim exists is
// taken, whether its layer is there yet or not (its writer may have been
// killed in between: the number is skipped).
func publishLayer(tmp, path, tag string, opt *LayerOptions) (string, int, error) {
	dir := LayerDir(path)
	if err := mkLayerDir(dir, filepath.Dir(path)); err != nil {
		return "", 0, fmt.Errorf("cannot make %s: %w", dir, err)
	}
	claim, err := newTempFile(filepath.Dir(path))
	if err != nil {
		return "", 0, fmt.Errorf("cannot publish a layer of %s: %w", path, err)
	}
	defer func() {
		dropTemp(claim.Name()) // the claims it was linked to stay
		claim.Close()
	}()
	// floor is one above the number last tried: a listing of a network
	// file system may be older than the link that failed (sshfs caches
	// directories for 20 s), and must not make us try it again.
	floor := 1
	for try := 0; try < 100; try++ {
		l, err := listNumbers(path, opt.Trust)
		if err != nil {
			return "", 0, err
		}
		fold := foldOfPath(path)
		folded := fold.top
		if n := l.inView(fold); n >= MaxLayers {
			return "", 0, &Error{File: dir, Err: ErrTooLarge, Msg: fmt.Sprintf("the set has %d layers already (limit %d); run kbundle merge %s", n, MaxLayers, path)}
		}
		seq := l.next(max(floor, folded+1))
		if seq > MaxLayerSeq {
			why := fmt.Sprintf("the base's %s is %d", MetaSetFolded, folded)
			if l.topSeq > folded {
				why = fmt.Sprintf("%s (owner %s) holds number %06d", l.top, ownerName(l.topUID), l.topSeq)
			}
			return "", 0, &Error{File: dir, Err: ErrTooLarge, Msg: fmt.Sprintf("layer numbers exhausted (limit %d): %s; remove it if it is no layer of yours, else the set takes no more layers: pack its merged view anew (kbundle load, then kbundle pack)", MaxLayerSeq, why)}
		}
		if layerListed != nil {
			layerListed()
		}
		opt.failpoint("listed")
		floor = seq + 1
		if err := linkTemp(claim.Name(), claimName(dir, seq)); errors.Is(err, fs.ErrExist) {
			continue // another writer's number
		} else if err != nil {
			return "", 0, fmt.Errorf("cannot publish a layer in %s: %w", dir, err)
		}
		opt.failpoint("claimed")
		name := filepath.Join(dir, fmt.Sprintf("%06d-%s.kbundle", seq, tag))
		if err := linkTemp(tmp, name); errors.Is(err, fs.ErrExist) {
			continue // a layer of that number without its claim
		} else if err != nil {
			return "", 0, fmt.Errorf("cannot publish %s: %w", name, err)
		}
		return name, seq, nil
	}
	return "", 0, fmt.Errorf("cannot publish a layer in %s: every number tried was taken (or its file system refuses hard links)", dir)
}

// claimName is the claim of layer number seq in the layer directory dir.
func claimName(dir string, seq int) string {
	return filepath.Join(dir, fmt.Sprintf(".%06d.claim", seq))
}

// claimRe is a claim's name (claimName).
var claimRe = regexp.MustCompile(`^\.([0-9]{6})\.claim$`)

// layerListed, when not nil, is called by publishLayer between its
// listing and its links: a test hook (another writer publishes in
// between).
var layerListed func()

// numbers are the layer numbers a listing of a layer directory shows.
type numbers struct {
	taken  map[int]bool // a layer or claim of any owner
	layers []SetLayer   // of any owner
	// topSeq is the highest number among the layers and claims of
	// trusted owners (the writer, root, TrustPolicy.Owners): top is that
	// file, topUID its owner.
	topSeq int
	top    string
	topUID uint32
}

// listNumbers lists the layer directory of the set at path. Names of
// owners p does not trust take their number, but do not move the next
// one: another member's empty file named like layer 999999 or a hundred
// claims of theirs cost a writer nothing (X7).
func listNumbers(path string, p *TrustPolicy) (*numbers, error) {
	dir := LayerDir(path)
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot publish a layer of %s: %w", path, err)
	}
	l := &numbers{taken: map[int]bool{}}
	for _, de := range des {
		m := layerRe.FindStringSubmatch(de.Name())
		if m == nil {
			m = claimRe.FindStringSubmatch(de.Name())
		} else {
			n, _ := strconv.Atoi(m[1])
			l.layers = append(l.layers, SetLayer{Path: filepath.Join(dir, de.Name()), Seq: n})
		}
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		l.taken[n] = true
		if n <= l.topSeq {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // gone since the listing
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && p.owner(st.Uid) {
			l.topSeq, l.top, l.topUID = n, filepath.Join(dir, de.Name()), st.Uid
		}
	}
	return l, nil
}

// inView counts the layers that fold does not skip (of any owner: a
// reader loads them all, or refuses the set).
func (l *numbers) inView(fold setFold) int {
	n := 0
	for _, s := range l.layers {
		if !fold.skips(s) {
			n++
		}
	}
	return n
}

// next is the lowest number that is at least from, above every trusted
// layer and claim, and not taken.
func (l *numbers) next(from int) int {
	n := max(from, l.topSeq+1)
	for l.taken[n] {
		n++
	}
	return n
}

// mkLayerDir makes a set's layer directory (none there yet), 0755, or
// 0775 when the set's directory parent lets its group write (a group's
// shared set: the other members add their layers too), keeping a setgid
// bit the directory got from parent.
func mkLayerDir(dir, parent string) error {
	// One rule, for a layer and a use record alike, whichever comes first
	// (H5 of the 2026-12-01b review): g+rwx only where parent is a group's
	// shared directory (groupShared), never in a sticky one others can
	// write (H4). One of ours that a kbundle before this rule made without
	// the group's write bit in such a directory is given it.
	err := os.Mkdir(dir, 0o755)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	var pst, st unix.Stat_t
	if unix.Stat(parent, &pst) != nil || !groupShared(&pst) {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // not ours to fix: linking into it says what is wrong
	}
	defer unix.Close(fd)
	if unix.Fstat(fd, &st) != nil || st.Uid != uint32(os.Geteuid()) || st.Mode&0o070 == 0o070 {
		return nil
	}
	return unix.Fchmod(fd, st.Mode&0o7777|0o070)
}

// groupShared reports whether st is a directory its group may write and
// others may not, and not a sticky shared one (sharedDir: the system's
// temporary directory, /dev/shm, a 1777 scratch): a layer directory
// made group-writable there would be refused as untrusted (its group
// is the writer's own), H4 of the 2026-12-01b review.
func groupShared(st *unix.Stat_t) bool {
	return st.Mode&0o020 != 0 && st.Mode&0o002 == 0 && !sharedDir(st)
}

// foldOfPath is the fold of the base at path (none: no base, or one that
// does not open; a reader says why).
func foldOfPath(path string) setFold {
	r, err := Open(path, nil)
	if err != nil {
		return setFold{}
	}
	defer r.Close()
	f, _ := parseFold(r.Meta(), path)
	return f
}

// linkTemp links the tracked temporary tmp to dst, which must not exist
// (fs.ErrExist when it does), under tempsMu: after RemoveTemps it fails
// with ErrExiting.
func linkTemp(tmp, dst string) error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing || temps[tmp] == nil {
		return fmt.Errorf("cannot write %s: %w", dst, ErrExiting)
	}
	err := os.Link(tmp, dst)
	if err != nil && errors.Is(err, syscall.EPERM) && linkTaken(dst) {
		// sshfs (its hardlink@openssh.com) answers EPERM, not EEXIST,
		// when the name exists: the SFTP server's failure has no reason.
		return &os.LinkError{Op: "link", Old: tmp, New: dst, Err: fs.ErrExist}
	}
	return err
}

// linkTaken reports whether a link(2) to dst refused with EPERM means
// that dst exists: it does, or its directory is one this process may
// write, where EPERM has no other cause on the file systems kbundle
// publishes on (a negative lookup cached by a network file system can
// hide a name another client has just made).
func linkTaken(dst string) bool {
	if _, err := os.Lstat(dst); err == nil {
		return true
	}
	return unix.Access(filepath.Dir(dst), unix.W_OK) == nil
}

// sortedEntries are w's entries as Close wrote them, by name.
func sortedEntries(w *Writer) []Entry {
	es := make([]Entry, 0, len(w.entries))
	for _, e := range w.entries {
		es = append(es, *e)
	}
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return es
}

// MergeOptions tune MergeSet.
type MergeOptions struct {
	LayerOptions
	Open *OpenOptions
	// Unit, when not nil, settles the merged view per cache unit (see
	// OpenedSet.Merged); it names the units of use records and pruning
	// (CacheUnit, as harvest records them).
	Unit func(name string) string
	// Grace is how long a folded layer is kept after the merge that
	// folded it, for readers that listed it before: MergeSet removes the
	// layers folded into the base it replaces only once that base has
	// been in place for Grace (its mtime, set when it is installed, is
	// older; 0: DefaultGrace).
	Grace time.Duration
	// MaxSize, when above 0, bounds the merged view's raw size: when it
	// is larger, the new base leaves out the least recently used cache
	// units, whole, down to PruneTarget(MaxSize) (PlanPrune), even for a
	// set of one bundle.
	MaxSize int64
	// Drop, when not nil, leaves out the cache units it reports (by
	// name, as Unit gives them): every file of each, and directories
	// left without files.
	Drop func(unit string) bool
	// DryRun decides and reports what the merge would fold and drop,
	// and writes and removes nothing.
	DryRun bool
}

// DefaultGrace is MergeOptions.Grace's default.
const DefaultGrace = 10 * time.Minute

// A MergeResult says what MergeSet did.
type MergeResult struct {
	Published
	Folded  int      // layers folded into the new base
	Removed []string // older layers removed (folded before, past the grace)
	// Prune is what MaxSize dropped (nil: no MaxSize); Dropped the
	// units left out, Prune's and Drop's, by name.
	Prune   *Prune
	Dropped []string
	// UseRecord is the use record that holds the last use of every unit
	// of the new base (docs/FORMAT.md, "Use records"), which replaced the
	// records named in UsesFolded.
	UseRecord  string
	UsesFolded []string
	// UsesSkipped are the use records ReadUses left out (SetUses.Skipped).
	UsesSkipped []string
	DryRun      bool
}

// ErrSetChanged: another merge installed a base, or the base was
// removed, while MergeSet merged the set it had read; it installed
// nothing (and MergeSet tried again, twice).
var ErrSetChanged = errors.New("the set changed while merging")

// mergeTries bounds MergeSet's attempts at a set that other merges keep
// changing.
const mergeTries = 3

// MergeSet folds the set's layers into one base bundle with the merged
// view's entries (identical contents stored once), written to a locked
// temporary, fsynced and installed in place of the base it read
// (installBase: never over another): a reader sees the old base or the
// new one. The new base records the highest layer it folded
// (MetaSetFolded), so readers skip those layers; they stay on disk for
// readers of the previous set, and a later MergeSet removes them once the
// base that folded them has been in place for the grace. A layer linked
// after the merge listed the set is not among them, whatever its number:
// it stays in view. Before the install it
// publishes a use record holding the last use of every unit of the new
// base (its mtime is the merge's, not its units'), and after it removes
// the use records that one replaces. A set of one bundle is left as it
// is (Folded 0), unless MaxSize or Drop leave units out. When another
// merge installs a base first, MergeSet reads the set again and merges
// anew, up to three times (then ErrSetChanged).
func MergeSet(ctx context.Context, path string, opt *MergeOptions) (*MergeResult, error) {
	if opt == nil {
		opt = &MergeOptions{}
	}
	for try := 1; ; try++ {
		res, err := mergeOnce(ctx, path, opt)
		if !errors.Is(err, ErrSetChanged) || try == mergeTries {
			return res, err
		}
	}
}

func mergeOnce(ctx context.Context, path string, opt *MergeOptions) (_ *MergeResult, err error) {
	grace := opt.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	s, err := OpenSet(path, opt.Open)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &MergeResult{DryRun: opt.DryRun}
	var held *os.File // the base read, whose place the new one takes
	if s.Layers[0].Seq == 0 {
		held = s.Read[0].f
		if inPlaceFor(held) >= grace && !opt.DryRun {
			res.Removed = removeFolded(path, s.fold)
		}
	}
	opt.failpoint("merge-opened")
	merged := s.Merged(opt.Unit)
	var units []Unit
	var uses *SetUses
	if s.HasDeltas() || opt.MaxSize > 0 || opt.Drop != nil {
		if uses, err = ReadUses(path, opt.Trust); err != nil {
			return nil, err
		}
		res.UsesSkipped = uses.Skipped
		units = s.units(merged, opt.Unit, uses.Units)
	}
	var drop map[string]bool
	if opt.MaxSize > 0 {
		res.Prune = PlanPrune(units, opt.MaxSize)
	}
	drop = res.Prune.droppedSet()
	if opt.Drop != nil {
		for _, u := range units {
			if opt.Drop(u.Name) {
				drop[u.Name] = true
			}
		}
	}
	for u := range drop {
		res.Dropped = append(res.Dropped, u)
	}
	slices.Sort(res.Dropped)
	res.Path = path
	if !s.HasDeltas() && len(drop) == 0 {
		return res, nil
	}
	top := s.Layers[len(s.Layers)-1].Seq
	res.Folded = len(s.Layers) - 1
	if s.Layers[0].Seq != 0 {
		res.Folded++
	}
	keep := withoutUnits(merged, opt.Unit, drop)
	if opt.DryRun {
		res.Entries = len(keep)
		return res, nil
	}
	dir := filepath.Dir(path)
	RemoveStale(dir)
	tmp, err := newTempFile(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot merge %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			dropTemp(tmp.Name())
		}
		tmp.Close()
		untrack(tmp.Name())
	}()
	w := NewWriter(tmp, &opt.Writer)
	last := s.Read[len(s.Read)-1]
	for k, v := range last.Meta() {
		if k != MetaSetFolded {
			w.SetMeta(k, v)
		}
	}
	if top = max(top, s.fold.top); top > 0 { // a base pruned alone keeps its fold
		w.SetMeta(MetaSetFolded, strconv.Itoa(top))
		names, err := foldedNames(s, res.Removed)
		if err != nil {
			return nil, err
		}
		w.SetMeta(MetaSetFoldedLayers, names)
	}
	for i := range keep {
		e := &keep[i]
		if e.Dir {
			err = w.Mkdir(e.Name, e.Mode, e.ModTime)
		} else {
			err = copyEntry(w, s.Read[e.Layer].Reader, &e.Entry)
		}
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	fi, err := finishTemp(ctx, tmp, bundlePerm(w))
	if err != nil {
		return nil, err
	}
	content := ContentDigestOf(sortedEntries(w))
	if err := verifyWritten(tmp, fi.Size(), content, path); err != nil {
		return nil, err // never a base that no reader accepts over one that reads
	}
	// The units' last uses, before the new base (written now) is in place.
	fold := &UseRecord{By: "merge", Units: map[string]Use{}}
	fold.Host, _ = os.Hostname()
	for _, u := range units {
		if !drop[u.Name] {
			fold.Units[u.Name] = Use{Time: u.LastUse, Unknown: u.Unknown, Written: !u.Recorded}
		}
	}
	inView := map[string]bool{}
	for _, u := range units {
		inView[u.Name] = true
	}
	for n, v := range uses.Units {
		// A unit no longer in the set, recorded lately: a concurrent
		// harvest's, kept. Older ones are of units gone (pruned, repacked).
		if !inView[n] && time.Since(v.Time) < grace {
			fold.Units[n] = v
		}
	}
	if len(fold.Units) > 0 {
		if res.UseRecord, err = writeUseFile(ctx, path, fold); err != nil {
			return nil, err
		}
	}
	opt.failpoint("merge-written")
	// Its grace runs from now: in place from the next step on.
	if err := os.Chtimes(tmp.Name(), time.Time{}, time.Now()); err != nil {
		return nil, err
	}
	if err := installBase(tmp.Name(), path, held); err != nil {
		if res.UseRecord != "" {
			os.Remove(res.UseRecord) // the records it replaces are still there
		}
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	removeUses(uses.Records, res.UseRecord)
	res.UsesFolded = uses.Records
	res.Base, res.Digest, res.Size = true, w.Digest(), fi.Size()
	res.Content, res.Entries = content, len(w.entries)
	res.Untrusted = CheckTrust(path, opt.Trust)
	return res, nil
}

// inPlaceFor is how long the base f has been in place: its mtime, which
// MergeSet sets right before installing a base.
func inPlaceFor(f *os.File) time.Duration {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return time.Since(fi.ModTime())
}

// noExchange makes installBase take the file systems' way without
// renameat2(RENAME_EXCHANGE) (NFS, sshfs): a test hook.
var noExchange bool

// installBase puts the merged base tmp (a tracked temporary, forgotten
// once in place) at path, in place of the base the merge read, held (nil:
// the set had none), and only of it: a base that another merge installed
// meanwhile (folded further, or its folded layers removed since) stays,
// and the error is ErrSetChanged.
//
// The check: path is still held's file (device and inode), then
// renameat2(RENAME_EXCHANGE) swaps the two names and what it took out of
// place is checked again; when it is another base (installed between
// the check and the exchange), the exchange is undone. Where the file
// system has no RENAME_EXCHANGE, the check is followed by rename(2): a
// base installed between the two is replaced (docs/FORMAT.md, "The
// protocol", says when that can happen). Without a base, link(2) makes
// the new one, failing when one has appeared.
func installBase(tmp, path string, held *os.File) error {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	if closing || temps[tmp] == nil {
		return fmt.Errorf("cannot write %s: %w", path, ErrExiting)
	}
	changed := func(why string) error {
		return &Error{File: path, Err: ErrSetChanged, Msg: why + "; this merge installed nothing: run it again"}
	}
	done := func() error {
		os.Remove(tmp) // the base taken out of place, or our second name
		forget(tmp)
		return nil
	}
	if held == nil {
		err := os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.EPERM) && linkTaken(path) {
			return changed("a base appeared")
		}
		if err != nil {
			return err
		}
		return done()
	}
	want, err := fileID(held.Stat())
	if err != nil {
		return err
	}
	if id, err := fileID(os.Stat(path)); errors.Is(err, fs.ErrNotExist) {
		return changed("the base was removed")
	} else if err != nil {
		return err
	} else if id != want {
		return changed("another merge installed a base")
	}
	if !noExchange {
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
		if err == nil {
			if id, _ := fileID(os.Stat(tmp)); id == want {
				return done()
			}
			// Installed between the check and the exchange: put it back.
			if unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE) != nil {
				os.Rename(tmp, path)
				forget(tmp)
			}
			return changed("another merge installed a base")
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
			return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err}
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	forget(tmp)
	return nil
}

// A fileKey is a file's device and inode.
type fileKey struct{ dev, ino uint64 }

// fileID is the device and inode of fi (from a Stat or Lstat).
func fileID(fi os.FileInfo, err error) (fileKey, error) {
	if err != nil {
		return fileKey{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, fmt.Errorf("%s: no inode", fi.Name())
	}
	return fileKey{uint64(st.Dev), st.Ino}, nil
}

// copyEntry copies file e of r into w, checked against its digest.
func copyEntry(w *Writer, r *Reader, e *Entry) error {
	f, err := r.Open(e.Name)
	if err != nil {
		return err
	}
	defer f.Close()
	return w.CopyFile(e.Name, e.Mode, e.ModTime, e.Size, e.Digest, f.(io.Reader))
}

// foldedNames is MetaSetFoldedLayers of a base merged from s: the layers
// it read and those its base folded, less those removed.
func foldedNames(s *OpenedSet, removed []string) (string, error) {
	var names []string
	for _, l := range append(slices.Clone(s.folded), s.Layers...) {
		if l.Seq > 0 && !slices.Contains(removed, l.Path) {
			names = append(names, filepath.Base(l.Path))
		}
	}
	if len(names) > MaxFoldedLayers {
		return "", &Error{File: LayerDir(s.Path), Err: ErrTooLarge, Msg: fmt.Sprintf("%d layers folded and not yet removed (limit %d); run kbundle merge %s again once its base is older than the grace", len(names), MaxFoldedLayers, s.Path)}
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(a, b) })
	return strings.Join(slices.Compact(names), ","), nil
}

// removeFolded removes the layers that fold (the base's) folds, from a
// fresh listing (best effort), returning the paths removed, and the
// claims of their numbers that no layer left holds.
func removeFolded(path string, fold setFold) []string {
	all, err := ListLayers(path, 0)
	if err != nil {
		return nil
	}
	var out []string
	left := map[int]bool{}
	for _, l := range all {
		if fold.skips(l) && os.Remove(l.Path) == nil {
			out = append(out, l.Path)
		} else {
			left[l.Seq] = true
		}
	}
	des, _ := os.ReadDir(LayerDir(path))
	for _, de := range des {
		if m := claimRe.FindStringSubmatch(de.Name()); m != nil {
			if n, _ := strconv.Atoi(m[1]); n <= fold.top && !left[n] {
				os.Remove(filepath.Join(LayerDir(path), de.Name())) // its layer's number, folded
			}
		}
	}
	return out
}

// StageOptions are opt with the set's layers above its base fed to
// Stage (ExtractOptions.Layers) and Unit set to CacheUnit: base Stage on
// s.Read[0] with them to extract the merged view.
func (s *OpenedSet) StageOptions(opt ExtractOptions) *ExtractOptions {
	i := 1
	opt.Unit = CacheUnit
	opt.Layers = func() (*Reader, string, error) {
		if i >= len(s.Read) {
			return nil, "", nil
		}
		i++
		return s.Read[i-1].Reader, s.Layers[i-1].Path, nil
	}
	return &opt
}

// HoldsLayers reports whether the directory dest is the layer folder of
// the set at path (LayerDir), lies below it, or holds it: a tree there
// would hold the set's layers, which a harvest writes and a load's
// --force would delete with the tree. Paths are compared made absolute,
// with symlinks resolved as far as they exist.
func HoldsLayers(dest, path string) bool {
	d, l := resolved(dest), resolved(LayerDir(path))
	return d == l || strings.HasPrefix(d, l+string(filepath.Separator)) || strings.HasPrefix(l, strings.TrimSuffix(d, string(filepath.Separator))+string(filepath.Separator))
}

// resolved is p absolute, with symlinks resolved in its longest existing
// leading part.
func resolved(p string) string {
	p, _ = filepath.Abs(p)
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == filepath.Dir(q) {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// EmptySet is the set of no entries, as `load --allow-missing` installs
// it where no set exists at path yet: one bundle in memory, named path,
// with no origin.
func EmptySet(path string) (*OpenedSet, error) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil)
	w.SetMeta(MetaCreator, "kbundle load --allow-missing")
	if err := w.Close(); err != nil {
		return nil, err
	}
	r, err := newReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), path)
	if err != nil {
		return nil, err
	}
	return &OpenedSet{Path: path, Layers: []SetLayer{{Path: path}}, Read: []*ReadCloser{{Reader: r}}}, nil
}

// SetMembers are the bundles of the set at path as a reader loads them:
// the base, when it exists, then the layers it does not fold.
func SetMembers(path string) ([]SetLayer, error) {
	var out []SetLayer
	var fold setFold
	if r, err := Open(path, nil); err == nil {
		fold, err = parseFold(r.Meta(), path)
		r.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, SetLayer{Path: path})
	} else if _, err := os.Lstat(path); err == nil {
		out = append(out, SetLayer{Path: path})
	}
	ls, err := ListLayers(path, 0)
	for _, l := range ls {
		if !fold.skips(l) {
			out = append(out, l)
		}
	}
	return out, err
}
