package load

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// MaxNamed is how many failing nodes an error names; the count says how
// many failed in all.
const MaxNamed = 8

// agree makes every rank return the same outcome of a step: nil, or the
// same *broadcast.Error naming up to MaxNamed failing nodes. vals ride on
// the agreement's collective, each combined with op over every rank
// (broadcast.AgreeWith).
func (l *leader) agree(local error, vals []int64, op mpi.Op) error {
	fail, err := broadcast.AgreeWith(l.world, local, MaxNamed, vals, op)
	if err != nil {
		return err
	}
	if fail != nil {
		return fail
	}
	return nil
}

// maxPresetList bounds the preset list rank 0 shares.
const maxPresetList = 1024

// The summary's counts that every rank gets, two vectors that ride on
// the agreements of Run (issue 31: each collective is a round trip at
// scale): maxima, the largest of the leaders' (rank 0's alone for
// [5], [6] and [8]), are ready when the staging ends and go with its
// agreement (agreeStaging). [7], 1 when some rank did not get rank 0's
// set check (a rank that does not lead, or a set rank 0 could not open),
// says whether share must broadcast the digest and presets; [8], 1 when
// rank 0 found its own file bad (verdict). nodeCounts, how many nodes
// had each note, go with the install's.
type (
	maxima     [9]int64
	nodeCounts [5]int64
)

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// maxima is this rank's part of the summary's largest figures.
func (l *leader) maxima() maxima {
	var m maxima
	s := l.sum
	if s.Leader {
		m = maxima{int64(s.Entries), s.Bytes, s.RawBytes, int64(l.extract), int64(l.stats.Bcast)}
	}
	if l.world.Rank() == 0 {
		m[5], m[6] = flag(s.Missing), int64(l.stats.Read)
	}
	m[7], m[8] = flag(!l.setSeen), flag(l.fileBad)
	return m
}

// nodeCounts is this rank's part of the summary's node counts.
func (l *leader) nodeCounts() nodeCounts {
	s := l.sum
	if !s.Leader {
		return nodeCounts{}
	}
	return nodeCounts{flag(len(s.MismatchKeys) > 0), flag(s.ToolchainError != "" || len(s.NotHere) > 0),
		flag(s.Skipped > 0), flag(l.allArchs && !s.AlreadyInstalled), flag(s.AlreadyInstalled)}
}

// share gives every rank what the leaders know: sizes, timings, the
// presets in use, how many nodes differ from the warm-up machine (or
// could not tell), and how many filtered GPU architectures. The counts
// came with the agreements (l.most, l.counts); the digest and the
// presets take one broadcast, unless every rank had them from the set
// check.
func (l *leader) share() error {
	s, most, sum := l.sum, l.most, l.counts
	s.Entries, s.Bytes, s.RawBytes = int(most[0]), most[1], most[2]
	s.Extract, s.Bcast = time.Duration(most[3]), time.Duration(most[4])
	s.Missing, s.Read = most[5] == 1, time.Duration(most[6])
	s.MismatchNodes, s.UnknownNodes, s.SkippedNodes, s.AllArchNodes = int(sum[0]), int(sum[1]), int(sum[2]), int(sum[3])
	s.InstalledNodes = int(sum[4])

	// Rank 0's content digest of the set, and its presets (they may come
	// from the bundle): the digest's 16 bytes, then the names. Where every
	// rank got them in the set check, as where every rank leads, nothing
	// more is sent.
	var buf []byte
	if most[7] == 0 {
		buf = append(slices.Clone(l.content[:]), l.setPresets...)
	} else {
		if l.world.Rank() == 0 {
			buf = append(slices.Clone(l.content[:]), preset.Names(l.presets)...) // not l.content itself: cgo refuses a pointer into a struct of pointers
		}
		var err error
		if buf, err = broadcast.BcastBytes(l.world, buf, uint64(len(bundle.Digest{}))+maxPresetList); err != nil {
			return commErr("presets", err)
		}
	}
	if len(buf) < len(bundle.Digest{}) {
		return commErr("presets", fmt.Errorf("rank 0 sent %d bytes, fewer than a digest", len(buf)))
	}
	var d bundle.Digest
	copy(d[:], buf)
	s.ContentDigest = bundle.FormatDigest(d)
	names := string(buf[len(d):])
	if names != "" {
		s.Presets = strings.Split(names, ",")
	}
	if l.presets == nil && len(s.Presets) > 0 {
		ps, err := preset.ParseList(names)
		if err != nil {
			return err
		}
		l.presets = ps
	}
	return nil
}
