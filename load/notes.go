package load

import (
	"encoding/json"
	"fmt"

	"github.com/kbundle/kbundle/broadcast"
)

// A NodeNote is what one node's leader has to say that the shared
// summary cannot: how the node differs from the warm-up machine.
type NodeNote struct {
	Host      string   `json:"host"`
	FirstRank int      `json:"first_rank"`
	LastRank  int      `json:"last_rank"`
	Mismatch  []string `json:"mismatch_keys"` // "key: warmed on X, here Y"
}

// noteTag tags the notes' messages.
const noteTag = 23

// maxNote bounds one node's note message.
const maxNote = 1 << 20

// gatherNotes gives rank 0 (Summary.Notes) every leader's note, in rank
// order, when any leader has one (share counted them: MismatchNodes):
// nothing when none has, else one message from each other leader. A communicator without point-to-point
// messages (broadcast.P2P) gathers nothing: Summary.MismatchNodes and
// rank 0's own MismatchKeys still say it.
func (l *leader) gatherNotes(group broadcast.NodeComm) error {
	mine := NodeNote{Host: l.plan.Host, FirstRank: l.nodes.First, LastRank: l.nodes.Last, Mismatch: l.sum.MismatchKeys}
	has := int64(0)
	if len(mine.Mismatch) > 0 {
		has = 1
	}
	n := int64(l.sum.MismatchNodes) // share's count of the leaders with one
	p2p, ok := group.(broadcast.P2P)
	if n == 0 || !ok || group.Size() == 1 {
		if n > 0 && group.Rank() == 0 && has == 1 {
			l.sum.Notes = []NodeNote{mine}
		}
		return nil
	}
	if group.Rank() != 0 {
		var b []byte
		if has == 1 {
			b, _ = json.Marshal(mine)
		}
		if err := broadcast.SendMsg(p2p, b, 0, noteTag); err != nil {
			return commErr("send the node's note", err)
		}
		return nil
	}
	if has == 1 {
		l.sum.Notes = append(l.sum.Notes, mine)
	}
	for r := 1; r < group.Size(); r++ {
		b, err := broadcast.RecvMsg(p2p, r, noteTag, maxNote)
		if err != nil {
			return commErr("receive a node's note", err)
		}
		if len(b) == 0 {
			continue
		}
		var nn NodeNote
		if err := json.Unmarshal(b, &nn); err != nil {
			return commErr("receive a node's note", fmt.Errorf("from leader %d: %w", r, err))
		}
		l.sum.Notes = append(l.sum.Notes, nn)
	}
	return nil
}
