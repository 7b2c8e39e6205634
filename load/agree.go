package load

import (
	"strings"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/mpi"
	"github.com/kbundle/kbundle/preset"
)

// MaxNamed is how many failing nodes an error names; the count says how
// many failed in all.
const MaxNamed = 8

// agree makes every rank return the same outcome of a step: nil, or the
// same *broadcast.Error naming up to MaxNamed failing nodes.
func (l *leader) agree(local error) error {
	fail, err := broadcast.Agree(l.world, local, MaxNamed)
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

// share gives every rank what the leaders know: sizes, timings, the
// presets in use, how many nodes differ from the warm-up machine (or
// could not tell), and how many filtered GPU architectures.
func (l *leader) share() error {
	s := l.sum
	vals := make([]*int64, 10)
	for i := range vals {
		vals[i] = new(int64)
	}
	flag := func(v *int64, b bool) {
		if b {
			*v = 1
		}
	}
	if s.Leader {
		*vals[0], *vals[1], *vals[2] = int64(s.Entries), s.Bytes, s.RawBytes
		*vals[3] = int64(l.extract)
		*vals[4] = int64(l.stats.Bcast)
		flag(vals[5], len(s.MismatchKeys) > 0)
		flag(vals[7], s.ToolchainError != "" || len(s.NotHere) > 0)
		flag(vals[8], s.Skipped > 0)
		flag(vals[9], l.allArchs && !s.AlreadyInstalled)
	}
	flag(vals[6], s.Missing) // rank 0's
	ops := []mpi.Op{mpi.Max, mpi.Max, mpi.Max, mpi.Max, mpi.Max, mpi.Sum, mpi.Max, mpi.Sum, mpi.Sum, mpi.Sum}
	for i, v := range vals {
		r, err := l.world.AllreduceInt64(*v, ops[i])
		if err != nil {
			return commErr("summary", err)
		}
		*v = r
	}
	s.Entries, s.Bytes, s.RawBytes = int(*vals[0]), *vals[1], *vals[2]
	s.Extract, s.Bcast = time.Duration(*vals[3]), time.Duration(*vals[4])
	s.MismatchNodes = int(*vals[5])
	s.Missing = *vals[6] == 1
	s.UnknownNodes, s.SkippedNodes, s.AllArchNodes = int(*vals[7]), int(*vals[8]), int(*vals[9])
	read, err := l.world.AllreduceInt64(int64(l.stats.Read), mpi.Max) // rank 0's
	if err != nil {
		return commErr("summary", err)
	}
	s.Read = time.Duration(read)

	// The presets: rank 0's choice (it may come from the bundle).
	var mine []byte
	if l.world.Rank() == 0 {
		mine = []byte(preset.Names(l.presets))
	}
	buf, err := broadcast.BcastBytes(l.world, mine, maxPresetList)
	if err != nil {
		return commErr("presets", err)
	}
	names := string(buf)
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
