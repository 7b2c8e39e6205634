package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// HarvestedMarker is the file a harvest leaves at the top of each DEST
// it harvested (U44 of the 2026-12-01b review): when, into which set and
// layer, so that `kbundle status` can say a tree's changes were given
// back and `kbundle clean` can warn about a tree whose were not. Like
// InstalledMarker it is kbundle's own: not content, never packed,
// harvested or compared with the install record.
const HarvestedMarker = ".kbundle-harvested"

// A HarvestRecord is what HarvestedMarker holds (JSON, one line).
type HarvestRecord struct {
	Version   int    `json:"kbundle_harvest_record"` // 1
	Harvested string `json:"harvested"`              // RFC 3339, UTC, ns
	Set       string `json:"set"`                    // the set harvested into
	Layer     string `json:"layer,omitempty"`        // the bundle written ("": nothing new)
}

// maxHarvestRecord bounds the record a reader reads.
const maxHarvestRecord = 1 << 16

// WriteHarvestRecord records in the tree kbundle installed at dest (a
// directory of the caller's, holding its install record) that it was
// harvested now into set, layer written ("": nothing new): a private
// file, written beside and renamed over the old one, never through a
// symlink.
func WriteHarvestRecord(dest, set, layer string) error {
	if _, err := ReadInstallRecord(dest); err != nil {
		return err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	b, _ := json.Marshal(HarvestRecord{Version: 1, Harvested: time.Now().UTC().Format(time.RFC3339Nano), Set: set, Layer: layer})
	tmp := fmt.Sprintf("%s.%d.tmp", HarvestedMarker, os.Getpid())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, markerPerm)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, HarvestedMarker)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// ReadHarvestRecord reads dest's harvest record; none (never harvested
// since its install, or by a kbundle before the record) matches
// fs.ErrNotExist.
func ReadHarvestRecord(dest string) (*HarvestRecord, error) {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(HarvestedMarker, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errf(ErrFormat, "%s: not a regular file", HarvestedMarker)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHarvestRecord+1))
	if err != nil {
		return nil, err
	}
	var r HarvestRecord
	if len(b) > maxHarvestRecord || json.Unmarshal(b, &r) != nil || r.Version != 1 {
		return nil, errf(ErrFormat, "%s: not a harvest record this kbundle reads", HarvestedMarker)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.Harvested); err != nil {
		return nil, errors.Join(errf(ErrFormat, "%s: its time", HarvestedMarker), err)
	}
	return &r, nil
}
