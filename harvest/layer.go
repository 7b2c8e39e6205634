package harvest

import (
	"context"
	"errors"
	"strings"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
)

// writeLayer writes the chosen files as a layer of the set: rank 0's
// from its DEST, the others' as their leaders send them. An error
// matching broadcast.ErrComm is a communicator failure; any other says
// why no layer was published (a file's own, fileErr, or publishErr's).
func writeLayer(ctx context.Context, p2p P2P, plan Plan, lists []*list, choice [][]int, dbs *merges, sum *Summary, mine *list, origin string) (*bundle.Published, error) {
	var commFail error
	filled := false
	var filesErr error // a file's own (fileErr): it says what to do
	pub, err := bundle.WriteLayer(ctx, plan.Bundle, &bundle.LayerOptions{Writer: plan.Writer, Trust: plan.Trust, Failpoint: plan.Failpoint}, func(w *bundle.Writer) error {
		if plan.Meta != nil {
			for k, v := range plan.Meta(mine.Dest) {
				w.SetMeta(k, v)
			}
		}
		filled = true
		if len(mine.Presets) > 0 {
			// The presets DEST was loaded with: a first harvest's base
			// carries them, so the next job's load prints their exports
			// (merge keeps the newest layer's).
			w.SetMeta(bundle.MetaPreset, strings.Join(mine.Presets, ","))
		}
		w.SetMeta(bundle.MetaOrigin, origin)
		w.SetMeta(bundle.MetaCreator, "kbundle harvest")
		var first error
		moved := false
		for r, l := range lists {
			rr := newRunReader(p2p, r, l.Files, choice[r], plan.Chunk)
			for _, i := range choice[r] {
				f := l.Files[i]
				var err error
				switch db := dbs.of(lists, r, i); {
				case db && r == 0:
					err = dbs.keepLocal(copyRef{r, i}, plan.Dest, f, origin)
				case db:
					err = dbs.keepRemote(rr, copyRef{r, i}, f)
					if errors.Is(err, broadcast.ErrComm) {
						commFail = err
						return err
					}
				case r == 0:
					err = copyLocal(w, plan.Dest, f, origin)
				default:
					err = recvFile(w, rr, f)
					if errors.Is(err, broadcast.ErrComm) {
						commFail = err
						return err
					}
				}
				if err != nil && first == nil {
					first = fileErr(l, f, err)
				}
				if first == nil && !moved {
					moved = true
					plan.failpoint("transfer")
				}
			}
		}
		if first == nil {
			first = dbs.write(ctx, w, plan.Python, lists, sum)
		}
		filesErr = first
		return first
	})
	if commFail != nil {
		return nil, commFail
	}
	if !filled {
		// The layer failed before it took the files (its temporary could
		// not be made): the leaders send them all the same, and a send
		// larger than MPI's eager limit completes only once received.
		if err := drain(p2p, lists, choice, plan.Chunk); err != nil {
			return nil, err
		}
	}
	if err != nil && filesErr == nil {
		err = publishErr(err)
	}
	return pub, err
}
