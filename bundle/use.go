package bundle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Use records say when each cache unit of a set was last used
// (docs/FORMAT.md, "Use records"): small JSON files in LayerDir(path),
// published as layers are (a locked temporary, fsync, link(2) to a name
// that must not exist), never rewritten. The last use of a unit is the
// latest any record gives it, so records combine in any order, and a
// record may be removed once its units are in another published one
// (a fold).

// UseRecordVersion is the version of the use records kbundle writes.
const UseRecordVersion = 1

// useRecordPrefix is how every use record starts (its first member).
const useRecordPrefix = `{"kbundle_use_record":`

// useRe is a use record's name in LayerDir: 16 random hex digits.
var useRe = regexp.MustCompile(`^use-[0-9a-f]{16}\.json$`)

// MaxUseRecords bounds the use records a reader reads: a harvest folds
// them into one when it finds more than useFoldAt, so only concurrent
// writers or a damaged directory reach it.
const MaxUseRecords = 1024

// useFoldAt is how many use records WriteUseRecord leaves before it
// folds them into one.
const useFoldAt = 32

// ErrUseRecord is matched, besides ErrFormat, ErrTooLarge or ErrVersion,
// by the error of a use record that cannot be read.
var ErrUseRecord = errors.New("unusable use record")

// useError is an error of one use record.
type useError struct{ err error }

func (e *useError) Error() string   { return e.err.Error() }
func (e *useError) Unwrap() []error { return []error{e.err, ErrUseRecord} }

// A Use is a cache unit's last use.
type Use struct {
	Time time.Time
	// Unknown: a job whose DEST did not record reads (mounted noatime)
	// may have used it at Time; it is counted as used then.
	Unknown bool
	// Written: no use was seen; Time is when the bundle holding the unit
	// was written (a merge keeps it so, its base being newer).
	Written bool
}

// later reports whether u is later evidence than v: a later time, or
// at the same time a use seen over one unknown or none.
func (u Use) later(v Use) bool {
	return u.Time.After(v.Time) || u.Time.Equal(v.Time) && (v.Unknown || v.Written) && !u.Unknown && !u.Written
}

// A UseRecord is one use record of a set.
type UseRecord struct {
	By   string // "harvest" or "merge"
	Job  string // the job id ("": none)
	Host string // where it was written ("": unknown)
	// Units are the units' last uses, by cache unit (CacheUnit's names).
	Units map[string]Use
}

// useFile is a use record as stored.
type useFile struct {
	Version int        `json:"kbundle_use_record"`
	Written string     `json:"written"`
	By      string     `json:"by"`
	Job     string     `json:"job,omitempty"`
	Host    string     `json:"host,omitempty"`
	Units   []useEntry `json:"units"`
}

type useEntry struct {
	Unit    string `json:"unit"`
	LastUse string `json:"last_use"`
	Unknown bool   `json:"unknown,omitempty"`
	Written bool   `json:"written,omitempty"`
}

// SetUses is what a set's use records say together.
type SetUses struct {
	Units   map[string]Use // the latest use of each unit any record names
	Records []string       // the records read
	// Skipped are the records left out, each "PATH: why": written by an
	// owner the reader does not trust (as for layers), or unreadable (a
	// damaged record). Their units count as if they named none.
	Skipped []string
}

// WriteUseRecord publishes rec as a new use record of the set at path
// and returns its path; a record of no unit is not written (""). When
// the set then has more than a few records, it folds them into one
// (best effort: the record is published whatever the fold does).
func WriteUseRecord(ctx context.Context, path string, rec *UseRecord) (string, error) {
	if len(rec.Units) == 0 {
		return "", nil
	}
	p, err := writeUseFile(ctx, path, rec)
	if err != nil {
		return "", err
	}
	if names, err := listUses(path); err == nil && len(names) > useFoldAt {
		if u, err := ReadUses(path, nil); err == nil {
			fold := &UseRecord{By: "harvest", Job: rec.Job, Host: rec.Host, Units: u.Units}
			if f, err := writeUseFile(ctx, path, fold); err == nil {
				removeUses(u.Records, f)
				p = f // it holds the record's units now
			}
		}
	}
	return p, nil
}

// writeUseFile writes rec to a locked temporary beside path, fsynced,
// and links it to a new name in LayerDir(path).
func writeUseFile(ctx context.Context, path string, rec *UseRecord) (string, error) {
	f := useFile{Version: UseRecordVersion, Written: time.Now().UTC().Format(time.RFC3339Nano), By: rec.By, Job: rec.Job, Host: rec.Host,
		Units: make([]useEntry, 0, len(rec.Units))}
	for u, v := range rec.Units {
		if err := checkUnitName(u); err != nil {
			return "", fmt.Errorf("cannot record the use of %q: %w", u, err)
		}
		f.Units = append(f.Units, useEntry{Unit: u, LastUse: v.Time.UTC().Format(time.RFC3339Nano), Unknown: v.Unknown, Written: v.Written})
	}
	slices.SortFunc(f.Units, func(a, b useEntry) int { return strings.Compare(a.Unit, b.Unit) })
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	dir := LayerDir(path)
	if err := mkLayerDir(dir, filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("cannot make %s: %w", dir, err)
	}
	tmp, err := newTempFile(filepath.Dir(path))
	if err != nil {
		return "", fmt.Errorf("cannot write a use record of %s: %w", path, err)
	}
	defer func() {
		dropTemp(tmp.Name()) // published by a link: the temporary name goes
		tmp.Close()
	}()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		return "", fmt.Errorf("cannot write a use record of %s: %w", path, err)
	}
	if _, err := finishTemp(ctx, tmp, 0o644); err != nil {
		return "", err
	}
	for try := 0; try < 100; try++ {
		var r [8]byte
		rand.Read(r[:])
		name := filepath.Join(dir, "use-"+hex.EncodeToString(r[:])+".json")
		err := linkTemp(tmp.Name(), name)
		if err == nil {
			return name, syncDir(dir)
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cannot publish %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("cannot publish a use record in %s: every name tried was taken", dir)
}

// listUses lists the use records in LayerDir(path), sorted.
func listUses(path string) ([]string, error) {
	des, err := os.ReadDir(LayerDir(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if useRe.MatchString(de.Name()) {
			out = append(out, filepath.Join(LayerDir(path), de.Name()))
		}
	}
	return out, nil
}

// ReadUses reads the use records of the set at path and combines them:
// the latest use of each unit. Only records whose owner a layer of
// theirs would be trusted for are read (you, root, trust's owners: X1
// of the 2026-12-01b review, a member whose layers you refuse decided
// what your pruning deleted); others, and a record that breaks
// docs/FORMAT.md's rules, are skipped and named in Skipped, so that a
// planted or damaged record never stops a merge or a prune. A last use
// later than now (plus useSkew for clocks) counts as now. A record
// removed between the listing and its reading (folded by another
// writer, whose fold holds its units) makes it list again. More than
// MaxUseRecords trusted records is an error (ErrTooLarge). No record is
// no use known.
func ReadUses(path string, trust *TrustPolicy) (*SetUses, error) {
	for try := 0; ; try++ {
		u, err := readUses(path, trust)
		if err == nil || try >= 9 || !errors.Is(err, fs.ErrNotExist) {
			return u, err
		}
	}
}

// useSkew is how far past the reader's clock a last use may be (another
// node's clock) before it counts as now.
const useSkew = 5 * time.Minute

func readUses(path string, trust *TrustPolicy) (*SetUses, error) {
	names, err := listUses(path)
	if err != nil {
		return nil, err
	}
	out := &SetUses{Units: map[string]Use{}}
	latest := time.Now().Add(useSkew)
	for _, n := range names {
		b, uid, err := readUseFile(n)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err // folded meanwhile: list again
		}
		if err == nil && !trust.owner(uid) {
			out.Skipped = append(out.Skipped, fmt.Sprintf("%s: written by %s, whom you do not trust (a layer of theirs would be refused; KBUNDLE_TRUSTED_OWNERS=%s trusts them)", n, ownerName(uid), userArg(uid)))
			continue
		}
		if len(out.Records) == MaxUseRecords {
			return nil, &useError{&Error{File: LayerDir(path), Err: ErrTooLarge, Msg: fmt.Sprintf("more than %d use records", MaxUseRecords)}}
		}
		var rec *UseRecord
		if err == nil {
			if rec, err = parseUseRecord(b); err != nil {
				err = inFile(err, n)
			}
		}
		if err != nil {
			out.Skipped = append(out.Skipped, fmt.Sprintf("%s: skipped: %v", n, err))
			continue
		}
		out.Records = append(out.Records, n)
		for u, v := range rec.Units {
			if v.Time.After(latest) {
				v.Time = latest
			}
			if old, ok := out.Units[u]; !ok || v.later(old) {
				out.Units[u] = v
			}
		}
	}
	return out, nil
}

// readUseFile reads a use record: a regular file, not through a symlink,
// at most MaxRecordLen bytes; and its owner.
func readUseFile(name string) ([]byte, uint32, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st.Uid, &Error{File: name, Err: ErrFormat, Msg: "a use record must be a regular file"}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxRecordLen+1))
	if err != nil {
		return nil, st.Uid, err
	}
	if len(b) > MaxRecordLen {
		return nil, st.Uid, &Error{File: name, Err: ErrTooLarge, Msg: fmt.Sprintf("use record longer than %d bytes", MaxRecordLen)}
	}
	return b, st.Uid, nil
}

// parseUseRecord parses and checks a use record's bytes (docs/FORMAT.md,
// "Use records").
func parseUseRecord(b []byte) (*UseRecord, error) {
	if err := checkVersion(b, "use record", useRecordPrefix, "kbundle_use_record", UseRecordVersion); err != nil {
		return nil, err
	}
	var f useFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, errf(ErrFormat, "use record: %v", err)
	}
	if len(f.Units) > MaxEntries {
		return nil, errf(ErrTooLarge, "use record of %d units (limit %d)", len(f.Units), MaxEntries)
	}
	rec := &UseRecord{By: f.By, Job: f.Job, Host: f.Host, Units: make(map[string]Use, len(f.Units))}
	for i, e := range f.Units {
		if err := checkUnitName(e.Unit); err != nil {
			return nil, errf(ErrFormat, "use record: unit %q: %v", e.Unit, err)
		}
		if i > 0 && e.Unit <= f.Units[i-1].Unit {
			return nil, errf(ErrFormat, "use record: unit %q out of order or repeated", e.Unit)
		}
		t, err := time.Parse(time.RFC3339Nano, e.LastUse)
		if err != nil {
			return nil, errf(ErrFormat, "use record: unit %q: last_use %q is not an RFC 3339 time", e.Unit, e.LastUse)
		}
		rec.Units[e.Unit] = Use{Time: t, Unknown: e.Unknown, Written: e.Written}
	}
	return rec, nil
}

// checkUnitName checks a cache unit's name: an entry name, or one with a
// trailing slash (a Triton hash directory).
func checkUnitName(u string) error {
	return checkName(strings.TrimSuffix(u, "/"))
}

// removeUses removes the use records names (best effort), all but keep.
func removeUses(names []string, keep string) {
	for _, n := range names {
		if n != keep {
			os.Remove(n)
		}
	}
}
